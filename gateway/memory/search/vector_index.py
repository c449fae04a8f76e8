"""Dense search per namespace: FAISS exact inner product over the vectors kept in the store.

Each namespace's vectors hash is loaded lazily into a `faiss.IndexFlatIP` (exact search:
nothing to tune or to get wrong; its cost:
docs/decisions.md#exact-dense-search-gatewaymemorysearchvector_indexpy) and cached in this
process. Every search reads the namespace's version counter (one GET) and refreshes the
cached index when it changed — one refresh per namespace at a time; above STALE_OK_ABOVE
vectors the search does not wait for it and answers from the index as it is.

A refresh fetches only what it must and changes the index in place: turn vectors never
change under their id (the id is a hash of the turn and everything before it), so only ids
the index lacks are read (HKEYS + HMGET) and appended; summary chunks ("chunk:" ids) and facts
may be re-embedded under the same id, so they are read again (tens of items, not thousands)
and get a new row only when their vector changed. Rows of items gone or replaced are dead:
skipped by searches until a rebuild, once they outnumber the live ones.

In a user namespace (the turns and chunks of all of a user's conversations, ids qualified by
conversation) a search may leave out one conversation's items: the index keeps, per
conversation, a FAISS selector of the rows not in it (built with the index), and searches
through it (still exact).

Invariants: a search reads only the keys of the namespace it names (namespace_keys); results
are the k best ids of that namespace with their cosine similarity, best first; a stored vector
of another vector space (written by another embedder, of any dimension: see vector_store.py)
is skipped and logged, never searched — the index never mixes spaces; an item whose vector is
of another space is found by the lexical index only, until `gateway reindex` re-embeds it
(gateway/memory/jobs/reindex.py); an excluded conversation's items are never returned.

Such foreign vectors are read again at each refresh of their namespace (they may have been
re-embedded meanwhile): a cost of the time between switching embedders and re-indexing.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Sequence

import faiss
import numpy as np
import redis.asyncio as aioredis

from gateway.memory.records.keys import MemoryKeySpace
from gateway.memory.search.namespace_cache import Cached, NamespaceCache, namespace_keys
from gateway.memory.ports import UNREAD, Namespace, Unread
from gateway.memory.records.user_recall import is_chunk, split_id
from gateway.memory.records.vector_store import ForeignVector, decode_vector

log = logging.getLogger(__name__)

# Above this many vectors a search or a build can take more than ~0.2 ms, and runs on the
# index's own thread instead of the event loop (below it, the thread hop costs more).
OFFLOAD_ABOVE = 2048
# Namespaces with more vectors than this answer from the index they have while a refresh runs
# (as the lexical index does): the request does not wait for the refresh's two round trips,
# and what the index lacks are the newest turns, which the recent window forwards anyway.
STALE_OK_ABOVE = 50
# The resident memory of a row beyond its vector, estimated: its id, row and conversation.
ROW_BYTES = 300


@dataclass(slots=True)
class _Dense:
    """A namespace's index, grown in place by its refreshes.

    Rows are only ever appended (`index.add`); an item whose vector is gone or changed has its
    row marked dead (searches skip it) and — when changed — a new row. Once dead rows
    outnumber live ones a refresh builds a fresh index instead. Above OFFLOAD_ABOVE rows every
    search and add runs on the index's one thread (so never concurrently); below it, on the
    event loop. Mapping rows to ids after a search is safe meanwhile: `ids` only grows."""

    dim: int
    grouped: bool = False
    """User namespaces: each row's conversation is kept, to exclude one conversation."""
    index: faiss.IndexFlatIP = None  # type: ignore[assignment]
    ids: list[str] = field(default_factory=list)
    """Per row (dead rows keep their id)."""
    rows: dict[str, int] = field(default_factory=dict)
    """Live id -> row."""
    stored: dict[str, str] = field(default_factory=dict)
    """Mutable items (chunks, facts): the encoded vector of their live row, to tell a
    re-embedded item from an unchanged one."""
    dead: set[int] = field(default_factory=set)
    conversations: list[str] = field(default_factory=list)
    selectors: dict[tuple[str, int], tuple[faiss.SearchParameters, object]] = field(
        default_factory=dict)
    """(conversation, rows when made) -> search parameters selecting every row outside the
    conversation (with the selector they point to, kept alive beside them)."""

    def __post_init__(self) -> None:
        if self.index is None:
            self.index = faiss.IndexFlatIP(self.dim)

    @property
    def live(self) -> int:
        return len(self.rows)

    @property
    def nbytes(self) -> int:
        """The index's resident memory, estimated (rows dead or alive; FAISS grows its
        storage by doubling, so a half-empty half is counted)."""
        return len(self.ids) * (self.dim * 4 * 3 // 2 + ROW_BYTES)

    def register(self, items: Sequence[str], encoded: Sequence[str | None]) -> None:
        """Give `items` the next rows (their rows so far, if any, die); the caller adds their
        vectors to `index` next, in the same order. `encoded[i]` is kept for mutable items
        (None: immutable)."""
        for item, text in zip(items, encoded):
            self.kill(item)
            self.rows[item] = len(self.ids)
            self.ids.append(item)
            if self.grouped:
                self.conversations.append(sys.intern(split_id(item)[0]))
            if text is not None:
                self.stored[item] = text

    def kill(self, item: str) -> None:
        row = self.rows.pop(item, None)
        if row is not None:
            self.dead.add(row)
            self.stored.pop(item, None)

    def excluding(self, conversation: str) -> faiss.SearchParameters | None:
        if not self.grouped:
            return None
        made = (conversation, len(self.ids))
        if made not in self.selectors:
            self.selectors = {k: v for k, v in self.selectors.items() if k[1] == len(self.ids)}
            rows = np.flatnonzero(np.asarray(self.conversations) == conversation).astype(np.int64)
            selector = faiss.IDSelectorNot(faiss.IDSelectorBatch(rows))
            self.selectors[made] = (faiss.SearchParameters(sel=selector), (selector, rows))
        return self.selectors[made][0]


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
                 *, space: str, max_namespaces: int = 256, max_bytes: int = 256 << 20):
        """`space`: the vector space searched (vector_store.space_of the embedder)."""
        self.redis = redis
        self.dim = dim
        self.space = space
        self.keys = keys
        self._cache: NamespaceCache[_Dense] = NamespaceCache(max_namespaces, max_bytes)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="faiss",
                                            initializer=_single_threaded_faiss)
        self._refreshing: dict[Namespace, asyncio.Task[_Dense]] = {}

    @property
    def nbytes(self) -> int:
        """The cached namespaces' indexes, estimated resident bytes."""
        return self._cache.size

    @property
    def evictions(self) -> int:
        """Namespaces dropped from this process's cache to stay within its budget so far."""
        return self._cache.evictions

    def close(self) -> None:
        for task in self._refreshing.values():
            task.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def search(self, namespace: Namespace, query: np.ndarray, k: int, *,
                     excluding: str | None = None, turns_only: bool = False,
                     version: str | None | Unread = UNREAD) -> list[tuple[str, float]]:
        dense = await self._current(namespace, version)
        if not dense.live or k <= 0:
            return []
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(1, self.dim)
        params = dense.excluding(excluding) if excluding is not None else None
        # Dead rows (and chunks, for turns only) are skipped after the search: ask for as
        # many more. A conversation's or user's mutable items are its chunks.
        skipped = len(dense.stored) if turns_only and namespace.kind != "facts" else 0
        wanted = min(k + len(dense.dead) + skipped, len(dense.ids))
        search = functools.partial(dense.index.search, q, wanted, params=params)
        if len(dense.ids) > OFFLOAD_ABOVE:
            scores, rows = await asyncio.get_running_loop().run_in_executor(
                self._executor, search)
        else:
            scores, rows = search()
        hits = [(dense.ids[r], float(s)) for s, r in zip(scores[0], rows[0])
                if r >= 0 and r not in dense.dead]
        if skipped:
            hits = [hit for hit in hits if not _mutable(namespace, hit[0])]
        return hits[:k]

    async def _current(self, namespace: Namespace,
                       version: str | None | Unread = UNREAD) -> _Dense:
        if version is UNREAD:
            version = await self.redis.get(namespace_keys(self.keys, namespace).version)
        cached = self._cache.get(namespace)
        if cached is not None and cached.version == version:
            return cached.value
        task = self._refreshing.get(namespace)
        if task is None:  # one refresh per namespace at a time: it mutates the cached index
            task = asyncio.get_running_loop().create_task(self._refresh(namespace),
                                                          name="faiss-refresh")
            self._refreshing[namespace] = task
            task.add_done_callback(functools.partial(self._refreshed, namespace))
        if cached is not None and cached.value.live > STALE_OK_ABOVE:
            return cached.value  # the refresh runs beside this search
        return await asyncio.shield(task)

    def _refreshed(self, namespace: Namespace, task: asyncio.Task[_Dense]) -> None:
        self._refreshing.pop(namespace, None)
        if not task.cancelled() and task.exception() is not None:
            log.warning("FAISS refresh failed; the next search retries",
                        exc_info=task.exception())

    async def _refresh(self, namespace: Namespace) -> _Dense:
        nk = namespace_keys(self.keys, namespace)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.get(nk.version)
            pipe.hkeys(nk.vectors)
            version, present = await pipe.execute()
        cached = self._cache.get(namespace)
        dense = cached.value if cached is not None else None
        if dense is not None and len(dense.dead) > max(64, dense.live):
            dense = None  # rebuilt from the store rather than carrying the dead rows on
        present_set = set(present)
        # New ids, and the mutable items known (`stored`) — which may have been re-embedded.
        # Set operations: at 10k vectors a per-id Python loop would cost milliseconds.
        wanted = sorted(present_set - dense.rows.keys() | (present_set & dense.stored.keys())
                        if dense is not None else present_set)
        # Written after our HKEYS and deleted before this HMGET: None, skipped (the version
        # moved on, so the next search refreshes again).
        encoded = await self.redis.hmget(nk.vectors, wanted) if wanted else []
        fresh = dense is None
        if dense is None:
            dense = _Dense(self.dim, grouped=namespace.kind == "user")
        apply = functools.partial(self._apply, namespace, dense, present_set, wanted, encoded)
        if fresh and len(wanted) > OFFLOAD_ABOVE:  # a new index no search sees yet
            await asyncio.get_running_loop().run_in_executor(self._executor, apply)
        else:
            matrix = apply(add=False)
            if matrix is not None and len(dense.ids) > OFFLOAD_ABOVE:
                # Searches of this index run on the index's thread: so does adding to it.
                await asyncio.get_running_loop().run_in_executor(self._executor,
                                                                 dense.index.add, matrix)
            elif matrix is not None:
                dense.index.add(matrix)
        self._cache.put(namespace, Cached(version, dense, dense.nbytes))
        return dense

    def _apply(self, namespace: Namespace, dense: _Dense, present: set[str],
               wanted: Sequence[str], encoded: Sequence[str | None], *,
               add: bool = True) -> np.ndarray | None:
        """Bring `dense` to the store's state: ids no longer present die, new or re-embedded
        vectors get rows (an unchanged mutable one keeps its row). The new rows' vectors are
        added to the index (`add`) or returned for the caller to add."""
        for item in dense.rows.keys() - present:
            dense.kill(item)
        items: list[str] = []
        rows: list[np.ndarray] = []
        texts: list[str | None] = []
        skipped = 0
        for item, text in zip(wanted, encoded):
            if text is None:
                dense.kill(item)
                continue
            mutable = _mutable(namespace, item)
            if mutable and dense.stored.get(item) == text:
                continue
            try:
                rows.append(decode_vector(text, self.dim, self.space))
            except ForeignVector:
                skipped += 1
                dense.kill(item)
                continue
            items.append(item)
            texts.append(text if mutable else None)
        if skipped:
            log.warning("skipped %d stored vectors of another embedder's vector space in a %s "
                        "namespace of tenant %r: those items are recalled by lexical search "
                        "only until `gateway reindex` re-embeds them",
                        skipped, namespace.kind, namespace.tenant)
        if not items:
            return None
        dense.register(items, texts)
        matrix = np.ascontiguousarray(np.stack(rows), dtype=np.float32)
        if add:
            dense.index.add(matrix)
            return None
        return matrix
