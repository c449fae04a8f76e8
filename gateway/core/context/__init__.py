"""What the model sees: the rewrite under the budget, its packing, truncation, pinned messages
and the memory blocks. Pure; imports only `gateway.core`."""
