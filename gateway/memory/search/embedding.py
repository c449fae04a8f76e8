"""Embedding off the event loop: one dedicated thread runs the (blocking, CPU-bound) model.

Why one thread: the model is CPU-bound numpy; two threads would only fight over the same
cores and over the GIL between matmuls. Why batching: a sentence encoder embeds a batch
faster per sentence than one at a time
(docs/decisions.md#embedding-batches-gatewaymemorysearchembeddingpy), so calls that arrive
while the thread is busy (concurrent requests' queries, the memory worker's turns) are
embedded together.

How batching works, with no background task: every call queues its texts and a future, then
submits one "drain" job to the single-thread executor. A drain takes queued calls, oldest
first, up to `max_batch` texts (always at least one call), embeds them in one model call and
resolves their futures; a drain that finds the queue empty (earlier drains took its call)
does nothing. As many drains run as calls were made, and each takes at least one call if any
is queued, so every call is served, in order. A call cancelled while queued is skipped.
Queries (`embed_query`) and passages (`embed`) are never in one batch: a drain takes calls of
the kind of the oldest one (models like e5 embed the two with different prefixes).
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Sequence

import numpy as np

from gateway.memory.ports import Embedder
from gateway.memory.records.vector_store import space_of


class EmbeddingService:
    """Async front of one `Embedder`. Invariant: `embed(texts)` returns exactly
    `embedder.embed(texts)` (rows in order), whatever it was batched with, and
    `embed_query(texts)` exactly `embedder.embed_query(texts)`."""

    def __init__(self, embedder: Embedder, max_batch: int = 64):
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.embedder = embedder
        self.max_batch = max_batch
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="embedding")
        self._queue: deque[tuple[list[str], Future[np.ndarray], bool]] = deque()
        self._queue_lock = threading.Lock()
        self._batch_sizes: Counter[int] = Counter()
        """Texts per model call since the last `take_batch_sizes` (for metrics)."""

    @property
    def dim(self) -> int:
        return self.embedder.dim

    @property
    def space(self) -> str:
        """The tag of the embedder's vector space (gateway/memory/records/vector_store.py)."""
        return space_of(self.embedder)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32, L2-normalised rows: texts to store or compare. Model
        errors propagate."""
        return await self._embed(texts, query=False)

    async def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        """As `embed`, for search queries."""
        return await self._embed(texts, query=True)

    async def _embed(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        result: Future[np.ndarray] = Future()
        with self._queue_lock:
            self._queue.append((list(texts), result, query))
        self._executor.submit(self._drain)
        return await asyncio.wrap_future(result)

    async def embed_one(self, text: str) -> np.ndarray:
        """(dim,) float32."""
        return (await self.embed([text]))[0]

    async def embed_query_one(self, text: str) -> np.ndarray:
        """(dim,) float32: one search query."""
        return (await self.embed_query([text]))[0]

    async def warm_up(self) -> None:
        """Load the model now (a lazy model would otherwise load inside the first request)."""
        await self.embed(["warm-up"])

    def close(self) -> None:
        """Stop the thread after the running batch; queued calls fail with CancelledError."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        with self._queue_lock:
            pending, self._queue = list(self._queue), deque()
        for _, result, _ in pending:
            result.cancel()

    def take_batch_sizes(self) -> Counter[int]:
        """Texts per model call -> calls, since the last take (the worker's job metrics)."""
        with self._queue_lock:
            taken, self._batch_sizes = self._batch_sizes, Counter()
        return taken

    def _take(self) -> tuple[list[tuple[list[str], Future[np.ndarray]]], bool]:
        """Queued calls, oldest first, all of the oldest one's kind (query or not)."""
        taken: list[tuple[list[str], Future[np.ndarray]]] = []
        size = 0
        query = False
        with self._queue_lock:
            if self._queue:
                query = self._queue[0][2]
            while self._queue and self._queue[0][2] == query and \
                    (not taken or size + len(self._queue[0][0]) <= self.max_batch):
                texts, result, _ = self._queue.popleft()
                # False when the caller was cancelled while queued: skip its texts.
                if result.set_running_or_notify_cancel():
                    taken.append((texts, result))
                    size += len(texts)
        return taken, query

    def _drain(self) -> None:
        """Runs in the embedding thread."""
        taken, query = self._take()
        if not taken:
            return
        flat = [text for texts, _ in taken for text in texts]
        model = self.embedder.embed_query if query else self.embedder.embed
        try:
            # One call larger than max_batch is embedded in slices of max_batch.
            matrix = np.concatenate([model(flat[i:i + self.max_batch])
                                     for i in range(0, len(flat), self.max_batch)])
            with self._queue_lock:
                for i in range(0, len(flat), self.max_batch):
                    self._batch_sizes[len(flat[i:i + self.max_batch])] += 1
        except BaseException as exc:  # noqa: BLE001 — not swallowed: each caller re-raises it
            for _, result in taken:
                result.set_exception(exc)
            return
        start = 0
        for texts, result in taken:
            result.set_result(matrix[start:start + len(texts)])
            start += len(texts)
