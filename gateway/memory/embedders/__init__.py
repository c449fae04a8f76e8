"""Embedders (see gateway.memory.ports.Embedder)."""
