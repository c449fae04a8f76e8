"""Dense search per namespace: FAISS exact inner product over the vectors kept in the store.

Each namespace's vectors hash is loaded lazily into a `faiss.IndexFlatIP` (exact search: at
10k vectors a query takes ~0.5 ms, and there is nothing to tune or to get wrong) and cached in
this process. Every search reads the namespace's version counter (one GET) and refreshes the
cached index when it changed.

A refresh fetches only what it must: turn vectors never change under their id (the id is a
hash of the turn and everything before it), so the ids still present keep their cached rows
and only new ids are read (HKEYS + HMGET). Summary chunks ("chunk:" ids) and facts may be
re-embedded under the same id, so they are always read again (tens of items, not thousands).

In a user namespace (the turns and chunks of all of a user's conversations, ids qualified by
conversation) a search may leave out one conversation's items: the index keeps, per
conversation, a FAISS selector of the rows not in it (built with the index), and searches
through it (still exact).

Invariants: a search reads only the keys of the namespace it names (namespace_keys); results
are the k best ids of that namespace with their cosine similarity, best first; a stored vector
of another dimension (written by another embedder) is skipped and logged, never returned; an
excluded conversation's items are never returned.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Sequence

import faiss
import numpy as np
import redis.asyncio as aioredis

from gateway.memory.keys import MemoryKeySpace
from gateway.memory.namespace_cache import Cached, NamespaceCache, namespace_keys
from gateway.memory.ports import UNREAD, Namespace, Unread
from gateway.memory.user_index import is_chunk, split_id
from gateway.memory.vector_store import decode_vector

log = logging.getLogger(__name__)

# Above this many vectors a search or a build can take more than ~0.2 ms, and runs on the
# index's own thread instead of the event loop (below it, the thread hop costs more).
OFFLOAD_ABOVE = 2048


@dataclass(frozen=True, slots=True)
class _Dense:
    ids: tuple[str, ...]
    matrix: np.ndarray
    index: faiss.IndexFlatIP | None
    conversations: np.ndarray | None = None
    """User namespaces: each row's conversation."""
    selectors: dict[str, tuple[faiss.SearchParameters, object]] = field(default_factory=dict)
    """Made on first use: conversation -> search parameters selecting the rows of every other
    conversation (with the selector they point to, kept alive beside them)."""

    def excluding(self, conversation: str) -> faiss.SearchParameters | None:
        if self.conversations is None:
            return None
        if conversation not in self.selectors:
            rows = np.flatnonzero(self.conversations == conversation).astype(np.int64)
            selector = faiss.IDSelectorNot(faiss.IDSelectorBatch(rows))
            self.selectors[conversation] = (faiss.SearchParameters(sel=selector),
                                            (selector, rows))
        return self.selectors[conversation][0]


def _build(ids: tuple[str, ...], matrix: np.ndarray, dim: int, grouped: bool = False) -> _Dense:
    if not ids:
        return _Dense((), np.zeros((0, dim), dtype=np.float32), None)
    index = faiss.IndexFlatIP(dim)
    index.add(matrix)
    conversations = np.array([split_id(i)[0] for i in ids]) if grouped else None
    return _Dense(ids, matrix, index, conversations)


def _mutable(namespace: Namespace, item_id: str) -> bool:
    if namespace.kind == "user":
        return is_chunk(item_id)
    return namespace.kind == "facts" or item_id.startswith("chunk:")



def _single_threaded_faiss() -> None:
    # One query at a time: FAISS's OpenMP threads only add overhead (and spin against the
    # other busy core); measured 0.47 ms vs 0.81 ms per 10k-vector query.
    faiss.omp_set_num_threads(1)


class FaissVectorIndex:
    """`VectorIndex` over the store's vectors. Call `close()` at shutdown."""

    def __init__(self, redis: aioredis.Redis, dim: int, keys: MemoryKeySpace = MemoryKeySpace(),
                 *, max_namespaces: int = 256, max_vectors: int = 500_000):
        self.redis = redis
        self.dim = dim
        self.keys = keys
        self._cache: NamespaceCache[_Dense] = NamespaceCache(max_namespaces, max_vectors)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="faiss",
                                            initializer=_single_threaded_faiss)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def search(self, namespace: Namespace, query: np.ndarray, k: int, *,
                     excluding: str | None = None,
                     version: str | None | Unread = UNREAD) -> list[tuple[str, float]]:
        dense = await self._current(namespace, version)
        if dense.index is None or k <= 0:
            return []
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(1, self.dim)
        params = dense.excluding(excluding) if excluding is not None else None
        search = functools.partial(dense.index.search, q, min(k, len(dense.ids)), params=params)
        if len(dense.ids) > OFFLOAD_ABOVE:
            scores, rows = await asyncio.get_running_loop().run_in_executor(
                self._executor, search)
        else:
            scores, rows = search()
        return [(dense.ids[r], float(s)) for s, r in zip(scores[0], rows[0]) if r >= 0]

    async def _current(self, namespace: Namespace,
                       version: str | None | Unread = UNREAD) -> _Dense:
        if version is UNREAD:
            version = await self.redis.get(namespace_keys(self.keys, namespace).version)
        cached = self._cache.get(namespace)
        if cached is not None and cached.version == version:
            return cached.value
        dense, version = await self._refresh(namespace, cached.value if cached else None)
        self._cache.put(namespace, Cached(version, dense, len(dense.ids)))
        return dense

    async def _refresh(self, namespace: Namespace,
                       old: _Dense | None) -> tuple[_Dense, str | None]:
        nk = namespace_keys(self.keys, namespace)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.get(nk.version)
            pipe.hkeys(nk.vectors)
            version, present = await pipe.execute()
        present_set = set(present)
        kept_rows: list[int] = []
        kept_ids: list[str] = []
        if old is not None:
            for row, item in enumerate(old.ids):
                if item in present_set and not _mutable(namespace, item):
                    kept_rows.append(row)
                    kept_ids.append(item)
        kept_set = set(kept_ids)
        wanted = sorted(i for i in present_set if i not in kept_set)
        # Written after our HKEYS and deleted before this HMGET: None, skipped (the version
        # moved on, so the next search refreshes again).
        encoded = await self.redis.hmget(nk.vectors, wanted) if wanted else []
        kept = old.matrix[kept_rows] if old is not None else None
        loop = asyncio.get_running_loop()
        args = (namespace, kept, tuple(kept_ids), wanted, encoded)
        if len(present) > OFFLOAD_ABOVE:
            dense = await loop.run_in_executor(self._executor, self._assemble, *args)
        else:
            dense = self._assemble(*args)
        return dense, version

    def _assemble(self, namespace: Namespace, kept: np.ndarray | None,
                  kept_ids: tuple[str, ...], wanted: Sequence[str],
                  encoded: Sequence[str | None]) -> _Dense:
        new_ids: list[str] = []
        rows: list[np.ndarray] = []
        skipped = 0
        for item, text in zip(wanted, encoded):
            if text is None:
                continue
            try:
                rows.append(decode_vector(text, self.dim))
            except ValueError:
                skipped += 1
                continue
            new_ids.append(item)
        if skipped:
            log.warning("skipped %d stored vectors of another dimension than %d in a %s "
                        "namespace (written by another embedder; re-index to use them)",
                        skipped, self.dim, namespace.kind)
        parts = [m for m in (kept, np.stack(rows) if rows else None) if m is not None and len(m)]
        matrix = (np.ascontiguousarray(np.concatenate(parts), dtype=np.float32) if parts
                  else np.zeros((0, self.dim), dtype=np.float32))
        return _build(kept_ids + tuple(new_ids), matrix, self.dim,
                      grouped=namespace.kind == "user")
