"""Embedders (see gateway.memory.ports.Embedder), chosen by name in config.

- "use" (default): USE multilingual v3, torch-free (`embedders/use.py`);
- "hash": the deterministic test embedder (`embedders/hashing.py`), for tests only.
"""

from __future__ import annotations

from typing import Any

from gateway.memory.ports import Embedder

KINDS = ("use", "hash")


def build_embedder(kind: str = "use", **options: Any) -> Embedder:
    """A new embedder of `kind`, configured by `options` (passed to its constructor).
    Raises ValueError naming the known kinds for an unknown one."""
    if kind == "use":
        from gateway.memory.embedders.use import UseEmbedder
        return UseEmbedder(**options)
    if kind == "hash":
        from gateway.memory.embedders.hashing import HashEmbedder
        return HashEmbedder(**options)
    raise ValueError(f"unknown embedder {kind!r}; known: {', '.join(KINDS)}")
