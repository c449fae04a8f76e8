"""A deterministic, dependency-free embedder for unit tests only — not a model.

Hashes words (and, for text without spaces, character bigrams) into a fixed number of buckets:
texts sharing words get similar vectors, so tests of indexing, recall and deduplication can
reason about neighbours without loading a model.
"""

from __future__ import annotations

import hashlib
import re
from typing import Sequence

import numpy as np

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


def _features(text: str) -> list[str]:
    features = []
    for word in _WORD.findall(text.lower()):
        if _CJK.search(word):
            features += [word[i:i + 2] for i in range(max(1, len(word) - 1))]
        else:
            features.append(word)
    return features


class HashEmbedder:
    related_threshold = 0.8
    topic_shift_threshold = 0.3
    relevance_floor: float | None = None
    """A test stand-in: no floor."""
    relevance_gate: float | None = None

    def __init__(self, dim: int = 256, variant: str = ""):
        """`variant`: another hashing of the same dimension — another vector space (tests of
        switching embedders use it: same dimension, incompatible vectors)."""
        self.dim = dim
        self.variant = variant
        self.name = f"hash-test:{variant}" if variant else "hash-test"

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feature in _features(text):
                key = f"{self.variant}\0{feature}" if self.variant else feature
                digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
                out[row, int.from_bytes(digest[:4], "little") % self.dim] += 1.0
            norm = np.linalg.norm(out[row])
            out[row] = out[row] / norm if norm else out[row]
        return out
