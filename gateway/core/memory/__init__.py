"""What the memory worker decides: compaction into summary chunks, extractive summaries, fact
extraction and policy, the profile, importance and topics. Pure; imports only `gateway.core`."""
