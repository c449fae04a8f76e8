"""The benchmarks' cache of vectors: embeddings by text, kept between runs.

A benchmark replays or imports the same histories run after run and embeds every turn again
each time: on LongMemEval's 120k-token histories most of a run. A vector depends on the text
alone, so the simulation (bench/locomo/simulate.py), the harness's plain retrieval and the
gateway children under test (bench/locomo/server.py, `--vector-cache`) read them from one
cache: `VectorCache`, one file per embedder (keyed by the text's digest) plus the files other
processes wrote beside it; `CachedEmbedder`, the gateway's default embedder answering from it
and embedding only what it lacks. A benchmark aid, never the product's: the gateway itself
keeps no vectors outside its store.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import uuid
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from gateway.memory.embedders.use import UseEmbedder


class VectorCache:
    """Embeddings by text (keyed by a digest), one .npz file per embedder under `root`, plus
    the files other processes wrote beside it (`save_new`), read with it."""

    def __init__(self, root: Path, embedder: Any) -> None:
        self.embedder = embedder
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self._path = root / f"{embedder.name}.npz"
        self._vectors: dict[str, np.ndarray] = {}
        self._extra = sorted(root.glob(f"{embedder.name}.*.npz"))
        for path in ([self._path] if self._path.exists() else []) + self._extra:
            data = np.load(path)
            keys = json.loads(str(data["keys"]))
            self._vectors.update(zip(keys, data["vectors"]))
        self._new: list[str] = []

    @staticmethod
    def _key(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def has(self, text: str) -> bool:
        return self._key(text) in self._vectors

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if self._key(t) not in self._vectors))
        for start in range(0, len(missing), 64):
            batch = missing[start:start + 64]
            for text, vector in zip(batch, self.embedder.embed(batch)):
                self._vectors[self._key(text)] = vector
                self._new.append(self._key(text))
        if not texts:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        return np.stack([self._vectors[self._key(t)] for t in texts])

    def save(self) -> None:
        """Write every vector known here into the cache's file (the files read beside it
        are merged in and removed)."""
        if self._new or self._extra:
            _write(self._path, self._vectors, list(self._vectors))
            for path in self._extra:
                path.unlink(missing_ok=True)
            self._new, self._extra = [], []

    def save_new(self) -> Path | None:
        """Write the vectors embedded here since the last save into a file of their own beside
        the cache's (for a process that shares the cache with others); None: none."""
        if not self._new:
            return None
        path = self.root / f"{self._path.stem}.{os.getpid()}-{uuid.uuid4().hex[:8]}.npz"
        _write(path, self._vectors, self._new)
        self._new = []
        return path


def _write(path: Path, vectors: dict[str, np.ndarray], keys: list[str]) -> None:
    """The vectors of `keys` into `path`, atomically (a reader never sees half a file)."""
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as f:
        np.savez(f, keys=json.dumps(keys), vectors=np.stack([vectors[k] for k in keys]))
    partial.replace(path)


class CachedEmbedder:
    """An embedder (gateway.memory.ports.Embedder) that answers `embed` from the cache under
    `root` and has `inner` (the gateway's default, USE, unless given) embed only what the
    cache lacks; queries (`embed_query`) go to `inner` uncached. `hits` and `misses` count the
    texts `embed` was asked for; `save` writes what it embedded beside the cache."""

    def __init__(self, root: Path, inner: Any = None) -> None:
        self.inner = inner if inner is not None else UseEmbedder()
        for name in ("name", "dim", "related_threshold", "topic_shift_threshold",
                     "relevance_floor", "relevance_gate"):
            setattr(self, name, getattr(self.inner, name))
        self._cache = VectorCache(root, self.inner)
        self._guard = threading.Lock()  # the embedding service's thread, and the warm-up
        self.hits = self.misses = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._guard:
            known = sum(1 for t in texts if self._cache.has(t))
            self.hits += known
            self.misses += len(texts) - known
            return self._cache.embed(texts)

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed_query(texts)

    def save(self) -> Path | None:
        """Write the vectors embedded here beside the cache (None: there were none)."""
        with self._guard:
            return self._cache.save_new()
