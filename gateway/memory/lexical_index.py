"""Lexical search per namespace: BM25 (bm25s) over the namespace's texts in the store.

Documents: for conversation memory, each turn entry's text (the `turns` hash, id = message
id) and each summary chunk's text (the `chunks` list, id "chunk:<id>"); for facts,
"<key>: <value>" per fact (the `facts` hash, id = fact key). Tokens come from
`gateway.core.lexical` (words; character unigrams + bigrams for Chinese).

Built lazily and cached per namespace like the dense index: one GET of the version counter
per search, a rebuild when it moved. Turn texts never change under their id, so their tokens
are kept across rebuilds and only new turns are fetched and tokenised; chunks and facts are
always read again. bm25s has no incremental insert, so the BM25 matrix itself is rebuilt
(measured ~17 ms at 1k turns, ~140 ms at 10k, on the index's own thread above a few
thousand documents).

A user namespace (the turns and chunks of all of a user's conversations) holds both in its
`recall` hash (ids "<conversation>/<item id>"); its chunks are re-read like facts, and a search
may leave out one conversation's items (masked before the top k are taken).

Invariants: a search reads only its namespace's keys; results are ids with BM25 score > 0,
best first; a query with no known token returns [] without scoring; an excluded
conversation's items are never returned.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import bm25s
import numpy as np
import redis.asyncio as aioredis

from gateway.core.lexical import tokens
from gateway.memory.stemming import stemmed
from gateway.memory.keys import MemoryKeySpace
from gateway.memory.namespace_cache import Cached, NamespaceCache, namespace_keys
from gateway.memory.ports import UNREAD, Namespace, Unread
from gateway.memory.user_index import is_chunk, split_id
from gateway.store.codec import json_object

log = logging.getLogger(__name__)

CHUNK_PREFIX = "chunk:"
# Above this many documents a rebuild takes more than a few ms: it runs on the index's thread.
OFFLOAD_ABOVE = 1000
# Namespaces with more documents than this keep serving their index while it is rebuilt.
STALE_OK_ABOVE = 50


@dataclass(frozen=True, slots=True)
class _Lexical:
    ids: tuple[str, ...]
    tokens: dict[str, list[str]]
    """Per document id (reused by the next rebuild for immutable turn documents)."""
    bm25: Any  # bm25s.BM25, None when the namespace has no document
    conversations: np.ndarray | None = None
    """User namespaces: each document's conversation."""
    masks: dict[str, np.ndarray] = field(default_factory=dict)
    """Made on first use: conversation -> a boolean mask of its documents."""

    def mask(self, conversation: str) -> np.ndarray | None:
        if self.conversations is None:
            return None
        if conversation not in self.masks:
            self.masks[conversation] = self.conversations == conversation
        return self.masks[conversation]


def chunk_id(raw_id: str) -> str:
    """The item id of a summary chunk (vectors and recall use "chunk:<id>")."""
    return raw_id if raw_id.startswith(CHUNK_PREFIX) else CHUNK_PREFIX + raw_id


def _build(ids: tuple[str, ...], docs: dict[str, list[str]], grouped: bool = False) -> _Lexical:
    if not ids:
        return _Lexical((), {}, None)
    bm25 = bm25s.BM25()
    bm25.index([docs[i] for i in ids], show_progress=False)
    conversations = np.array([split_id(i)[0] for i in ids]) if grouped else None
    return _Lexical(ids, docs, bm25, conversations)


class Bm25LexicalIndex:
    """`LexicalIndex` over the store's texts. Call `close()` at shutdown."""

    def __init__(self, redis: aioredis.Redis, keys: MemoryKeySpace = MemoryKeySpace(), *,
                 max_namespaces: int = 256, max_documents: int = 500_000, stem: bool = True):
        """`stem`: stem English words (gateway.memory.stemming), in documents and queries."""
        self.redis = redis
        self.keys = keys
        self.stem = stem
        self._cache: NamespaceCache[_Lexical] = NamespaceCache(max_namespaces, max_documents)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="bm25")
        self._refreshing: dict[Namespace, asyncio.Task[_Lexical]] = {}

    def _tokens(self, text: str) -> list[str]:
        words = tokens(text)
        return stemmed(words) if self.stem else words

    def close(self) -> None:
        for task in self._refreshing.values():
            task.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def search(self, namespace: Namespace, query: str, k: int, *,
                     excluding: str | None = None,
                     version: str | None | Unread = UNREAD) -> list[tuple[str, float]]:
        lexical = await self._current(namespace, version)
        if lexical.bm25 is None or k <= 0:
            return []
        token_ids = lexical.bm25.get_tokens_ids(self._tokens(query))
        if not token_ids:
            return []
        # Scoring touches only the postings of the query's tokens: sub-millisecond at 10k.
        scores = lexical.bm25.get_scores_from_ids(token_ids)
        mask = lexical.mask(excluding) if excluding is not None else None
        if mask is not None:
            scores = np.where(mask, 0.0, scores)
        n = min(k, len(scores))
        top = np.argpartition(-scores, n - 1)[:n]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(lexical.ids[i], float(scores[i])) for i in top if scores[i] > 0]

    async def _current(self, namespace: Namespace,
                       version: str | None | Unread = UNREAD) -> _Lexical:
        if version is UNREAD:
            version = await self.redis.get(namespace_keys(self.keys, namespace).version)
        cached = self._cache.get(namespace)
        if cached is not None and cached.version == version:
            return cached.value
        if cached is not None and cached.size > STALE_OK_ABOVE:
            # bm25s rebuilds a whole index to add one document (~40 ms at 1k turns, ~270 ms
            # at 10k): a large conversation's request keeps the index it has and a rebuild
            # runs beside it. What it lacks are the newest turns, which the recent window
            # forwards verbatim anyway.
            self._refresh_in_background(namespace, cached.value)
            return cached.value
        return await self._refresh_and_cache(namespace, cached.value if cached else None)

    async def _refresh_and_cache(self, namespace: Namespace, old: _Lexical | None) -> _Lexical:
        lexical, version = await self._refresh(namespace, old)
        self._cache.put(namespace, Cached(version, lexical, len(lexical.ids)))
        return lexical

    def _refresh_in_background(self, namespace: Namespace, old: _Lexical) -> None:
        """At most one rebuild per namespace at a time; tracked, cancelled by `close()`."""
        if namespace in self._refreshing:
            return
        task: asyncio.Task[_Lexical] = asyncio.get_running_loop().create_task(
            self._refresh_and_cache(namespace, old),
            name=f"bm25-refresh-{namespace.kind}")
        self._refreshing[namespace] = task

        def done(finished: asyncio.Task[_Lexical]) -> None:
            self._refreshing.pop(namespace, None)
            if not finished.cancelled() and finished.exception() is not None:
                log.warning("BM25 refresh failed; the next search retries",
                            exc_info=finished.exception())
        task.add_done_callback(done)

    async def _refresh(self, namespace: Namespace,
                       old: _Lexical | None) -> tuple[_Lexical, str | None]:
        texts = (await self._fact_texts(namespace) if namespace.kind == "facts"
                 else await self._conversation_texts(namespace, old))
        version, reused, fresh = texts
        docs = dict(reused)
        ids = tuple(list(reused) + list(fresh))
        grouped = namespace.kind == "user"
        if len(fresh) > OFFLOAD_ABOVE or len(ids) > OFFLOAD_ABOVE:
            return await asyncio.get_running_loop().run_in_executor(
                self._executor, self._tokenise_and_build, ids, docs, fresh, grouped), version
        return self._tokenise_and_build(ids, docs, fresh, grouped), version

    def _tokenise_and_build(self, ids: tuple[str, ...], docs: dict[str, list[str]],
                            fresh: dict[str, str], grouped: bool) -> _Lexical:
        for item, text in fresh.items():
            docs[item] = self._tokens(text)
        return _build(ids, docs, grouped)

    async def _conversation_texts(
            self, namespace: Namespace, old: _Lexical | None,
    ) -> tuple[str | None, dict[str, list[str]], dict[str, str]]:
        """(version, tokens of turns kept from `old`, texts to tokenise by id). A conversation
        keeps its chunks in a list; a user namespace keeps them beside the turns (mutable)."""
        nk = namespace_keys(self.keys, namespace)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.get(nk.version)
            pipe.hkeys(nk.documents)
            if nk.chunks is not None:
                pipe.lrange(nk.chunks, 0, -1)
            version, turn_ids, *rest = await pipe.execute()
        raw_chunks = rest[0] if rest else []
        previous = old.tokens if old is not None else {}
        mutable = is_chunk if namespace.kind == "user" else (lambda _: False)
        reused = {i: previous[i] for i in turn_ids if i in previous and not mutable(i)}
        wanted = [i for i in turn_ids if i not in reused]
        fresh: dict[str, str] = {}
        foreign = 0
        for item, raw in zip(wanted, await self.redis.hmget(nk.documents, wanted)
                             if wanted else []):
            entry = json_object(raw)
            if entry is None or not isinstance(entry.get("text"), str):
                foreign += raw is not None  # None: deleted since HKEYS; not an error
                continue
            fresh[item] = entry["text"]
        for raw in raw_chunks:
            chunk = json_object(raw)
            if chunk is None or not isinstance(chunk.get("text"), str) or "id" not in chunk:
                foreign += 1
                continue
            fresh[chunk_id(str(chunk["id"]))] = chunk["text"]
        if foreign:
            log.warning("skipped %d unreadable memory entries in a conversation namespace",
                        foreign)
        return version, reused, fresh

    async def _fact_texts(
            self, namespace: Namespace,
    ) -> tuple[str | None, dict[str, list[str]], dict[str, str]]:
        nk = namespace_keys(self.keys, namespace)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.get(nk.version)
            pipe.hgetall(nk.documents)
            version, facts = await pipe.execute()
        fresh: dict[str, str] = {}
        for field, raw in sorted(facts.items()):
            fact = json_object(raw)
            if fact is None or "value" not in fact:
                log.warning("skipped an unreadable fact in a facts namespace")
                continue
            fresh[field] = f"{fact.get('key', field)}: {fact['value']}"
        return version, {}, fresh
