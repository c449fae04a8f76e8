"""Lexical search per namespace: BM25 over the namespace's texts in the store.

Documents: for conversation memory, each turn entry's text (the `turns` hash, id = message
id) and each summary chunk's text (the `chunks` list, id "chunk:<id>"); for facts,
"<key>: <value>" per fact (the `facts` hash, id = fact key). Tokens come from
`terms`: `gateway.core.text.lexical`'s words, Chinese cut into dictionary words
(gateway/memory/search/segmentation.py; character unigrams + bigrams with segmentation off),
English words stemmed (gateway/memory/search/stemming.py; unless stemming is off). Days: a
document's day (the date anchor its text starts with, `gateway.core.text.days.day_of`) is one
more term, and a query gets the terms of the days it names ("5月2日", "On May 2nd"; relative
ones such as "昨天" from the latest day the namespace's documents hold), so a question that
names a day finds what was said on it.

Built lazily and cached per namespace like the dense index: one GET of the version counter
per search, a refresh when it moved. The index is incremental (`gateway.memory.search.bm25`): a
refresh reads the ids present (HKEYS), fetches and tokenises only the documents it does not
have, adds them and removes the ones gone — a recorded turn costs its own tokens, not a
rebuild of the conversation. Turn texts never change under their id; chunks may be rewritten
under theirs, so they are read again — and opened, decoded and tokenised only when what is
stored differs from what the last refresh read. Facts (at most a hundred) are rebuilt whole.

A user namespace (the turns and chunks of all of a user's conversations) holds both in its
`recall` hash (ids "<conversation>/<item id>"); a search may leave out one conversation's items
(masked before the top k are taken).

Concurrency: one refresh per namespace at a time (later searches wait for it, or — above
STALE_OK_ABOVE documents — answer from the index as it is while it runs); a refresh mutates
the cached index on the event loop between searches, never while one scores. A first build of
many documents runs on the index's own thread, on an index no search can see yet.

Invariants: a search reads only its namespace's keys; results are ids with BM25 score > 0,
best first; a query with no known token returns [] without scoring; an excluded
conversation's items are never returned; scores equal a fresh bm25s build over the live
documents (tests/unit/test_bm25.py).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import redis.asyncio as aioredis

from gateway.core.text.days import day_key, day_of, named_days
from gateway.core.text.lexical import Segmenter, tokens
from gateway.memory.search.bm25 import Bm25
from gateway.memory.records.keys import MemoryKeySpace
from gateway.memory.search.namespace_cache import Cached, NamespaceCache, namespace_keys
from gateway.memory.ports import UNREAD, Namespace, Unread
from gateway.memory.search.segmentation import segmenter
from gateway.memory.search.stemming import stemmed
from gateway.memory.records.user_recall import is_chunk, split_id
from gateway.store.codec import json_object
from gateway.store.encryption.crypto import NO_ENCRYPTION, Encryption

log = logging.getLogger(__name__)

CHUNK_PREFIX = "chunk:"
# A refresh tokenising more new documents than this builds a fresh index on the index's
# thread (a cold start of a long conversation) instead of adding them on the event loop.
OFFLOAD_ABOVE = 1000
# Namespaces with more documents than this answer from the index they have while a refresh
# runs: what it lacks are the newest turns, which the recent window forwards verbatim anyway.
STALE_OK_ABOVE = 50
# The resident memory of a document, estimated: per document (its id and row), per distinct
# term in it (its posting, and the posting's array form while cached), per word (its slot in
# the document's kept words).
DOCUMENT_BYTES = 200
POSTING_BYTES = 28
WORD_BYTES = 8


@dataclass(slots=True)
class _Lexical:
    """A namespace's index, updated in place by its refreshes (see the module docstring)."""

    bm25: Bm25 = field(default_factory=Bm25)
    ids: list[str] = field(default_factory=list)
    """Per row (removed rows keep their id)."""
    rows: dict[str, int] = field(default_factory=dict)
    """Live id -> row."""
    tokens: dict[str, list[str]] = field(default_factory=dict)
    """Live id -> its tokens (to tell whether a rewritten chunk changed)."""
    texts: dict[str, str] = field(default_factory=dict)
    """Live chunk id -> the text its tokens are of: a refresh reads every chunk again (they
    may be rewritten under their id) and tokenises only those whose text changed; a search
    for turns only masks these rows."""
    raws: dict[str, str] = field(default_factory=dict)
    """Chunk id -> the chunk as stored (sealed JSON) when last read: read again unchanged, it
    is not opened or decoded again (set by each refresh to what it read)."""
    grouped: bool = False
    """User namespaces: rows are masked by conversation."""
    masks: dict[str, np.ndarray] = field(default_factory=dict)
    """Made on first use and extended as rows are added: conversation -> its rows."""
    latest: datetime.date | None = None
    """The latest day a document was added with: "today" for a query's relative days."""

    def add(self, item: str, words: list[str], text: str | None = None,
            day: datetime.date | None = None) -> None:
        """`text`: a chunk's text (kept to skip tokenising it again while unchanged); `day`:
        the document's day (its term is among `words`). The words are kept interned: one
        object per distinct word, however many documents hold it."""
        words = list(map(sys.intern, words))
        if text is not None:
            self.texts[item] = text
        if day is not None and (self.latest is None or day > self.latest):
            self.latest = day
        old = self.rows.get(item)
        if old is not None:
            if self.tokens[item] == words:
                return
            self.bm25.remove(old)
        self.rows[item] = self.bm25.add(words)
        self.ids.append(item)
        self.tokens[item] = words

    @property
    def nbytes(self) -> int:
        """The index's resident memory, estimated (rows dead or alive)."""
        return (len(self.ids) * DOCUMENT_BYTES + self.bm25.postings * POSTING_BYTES
                + self.bm25.total_length * WORD_BYTES)

    def remove(self, item: str) -> None:
        row = self.rows.pop(item, None)
        if row is not None:
            self.bm25.remove(row)
            del self.tokens[item]
            self.texts.pop(item, None)

    def compacted(self) -> _Lexical:
        """Itself, or — once removed rows outnumber live ones — a rebuild of the live ones."""
        if self.bm25.dead <= max(64, self.bm25.live):
            return self
        fresh = _Lexical(grouped=self.grouped, latest=self.latest)
        for item in sorted(self.rows, key=self.rows.__getitem__):
            fresh.add(item, self.tokens[item], self.texts.get(item))
        return fresh

    def mask(self, conversation: str) -> np.ndarray | None:
        if not self.grouped:
            return None
        mask = self.masks.get(conversation)
        if mask is None or len(mask) < len(self.ids):
            done = 0 if mask is None else len(mask)
            tail = np.fromiter((split_id(i)[0] == conversation for i in self.ids[done:]),
                               dtype=bool, count=len(self.ids) - done)
            mask = tail if mask is None else np.concatenate([mask, tail])
            self.masks[conversation] = mask
        return mask


def _chunk_text(item: str, text: str) -> str | None:
    """What `_Lexical.texts` keeps of a document: chunks' texts (turns never change)."""
    return text if is_chunk(item) or item.startswith(CHUNK_PREFIX) else None


def terms(text: str, *, stem: bool = True, segment: Segmenter | None = None) -> list[str]:
    """The BM25 terms of a document or a query: `tokens`, CJK runs cut by `segment`, English
    words stemmed when `stem`."""
    words = tokens(text, segment=segment)
    return stemmed(words) if stem else words


def document_terms(text: str, *, stem: bool = True, segment: Segmenter | None = None,
                   ) -> tuple[list[str], datetime.date | None]:
    """(terms, day) of a stored document: `terms`, and its day's key when it has one."""
    words, day = terms(text, stem=stem, segment=segment), day_of(text)
    return (words + [day_key(day.month, day.day)] if day is not None else words), day


def query_terms(text: str, today: datetime.date | None = None, *, stem: bool = True,
                segment: Segmenter | None = None) -> list[str]:
    """The terms of a query: `terms`, and the keys of the days it names (relative days from
    `today`)."""
    return terms(text, stem=stem, segment=segment) + named_days(text, today)


def chunk_id(raw_id: str) -> str:
    """The item id of a summary chunk (vectors and recall use "chunk:<id>")."""
    return raw_id if raw_id.startswith(CHUNK_PREFIX) else CHUNK_PREFIX + raw_id


class Bm25LexicalIndex:
    """`LexicalIndex` over the store's texts. Call `close()` at shutdown."""

    def __init__(self, redis: aioredis.Redis, keys: MemoryKeySpace = MemoryKeySpace(), *,
                 max_namespaces: int = 256, max_bytes: int = 256 << 20, stem: bool = True,
                 segment: bool = True, encryption: Encryption = NO_ENCRYPTION):
        """`stem`: stem English words (gateway.memory.search.stemming), in documents and queries;
        `segment`: cut Chinese into dictionary words (gateway.memory.search.segmentation; its
        dictionary loads here, at start-up), else characters and bigrams; `encryption` opens
        the stored texts (the index is built in process, never stored)."""
        self.encryption = encryption
        self.redis = redis
        self.keys = keys
        self.stem = stem
        self.segment = segmenter(segment)
        self._cache: NamespaceCache[_Lexical] = NamespaceCache(max_namespaces, max_bytes)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="bm25")
        self._refreshing: dict[Namespace, asyncio.Task[_Lexical]] = {}

    def _document(self, text: str) -> tuple[list[str], datetime.date | None]:
        return document_terms(text, stem=self.stem, segment=self.segment)

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

    async def search(self, namespace: Namespace, query: str, k: int, *,
                     excluding: str | None = None, turns_only: bool = False,
                     version: str | None | Unread = UNREAD,
                     today: datetime.date | None = None) -> list[tuple[str, float]]:
        lexical = await self._current(namespace, version)
        words = query_terms(query, today or lexical.latest, stem=self.stem,
                            segment=self.segment)
        if k <= 0 or not lexical.bm25.knows_any(words):
            return []
        # Scoring touches only the postings of the query's tokens: sub-millisecond at 10k.
        scores = lexical.bm25.scores(words)  # a new array: masked in place
        mask = lexical.mask(excluding) if excluding is not None else None
        if mask is not None:
            scores[mask] = 0.0
        if turns_only and lexical.texts:  # the live chunks' rows
            scores[[lexical.rows[i] for i in lexical.texts]] = 0.0
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
        task = self._refreshing.get(namespace)
        if task is None:
            task = self._start_refresh(namespace)
        if cached is not None and cached.value.bm25.live > STALE_OK_ABOVE:
            return cached.value  # the refresh runs beside this search
        return await asyncio.shield(task)

    def _start_refresh(self, namespace: Namespace) -> asyncio.Task[_Lexical]:
        """The namespace's one refresh; tracked, cancelled by `close()`."""
        task = asyncio.get_running_loop().create_task(self._refresh(namespace),
                                                      name=f"bm25-refresh-{namespace.kind}")
        self._refreshing[namespace] = task

        def done(finished: asyncio.Task[_Lexical]) -> None:
            self._refreshing.pop(namespace, None)
            if not finished.cancelled() and finished.exception() is not None:
                log.warning("BM25 refresh failed; the next search retries",
                            exc_info=finished.exception())
        task.add_done_callback(done)
        return task

    async def _refresh(self, namespace: Namespace) -> _Lexical:
        cached = self._cache.get(namespace)
        old = cached.value if cached is not None and namespace.kind != "facts" else None
        if namespace.kind == "facts":
            version, present, fresh = await self._fact_texts(namespace)
            raws: dict[str, str] = {}
        else:
            version, present, fresh, raws = await self._conversation_texts(namespace, old)
        if old is None or len(fresh) > OFFLOAD_ABOVE:
            # A new index no search sees yet: built on the index's thread when it is large.
            grouped = namespace.kind == "user"
            base = ({i: (old.tokens[i], old.texts.get(i)) for i in present
                     if i in old.tokens and i not in fresh} if old is not None else {})
            latest = old.latest if old is not None else None
            if len(fresh) + len(base) > OFFLOAD_ABOVE:
                lexical = await asyncio.get_running_loop().run_in_executor(
                    self._executor, self._build, base, fresh, grouped, latest)
            else:
                lexical = self._build(base, fresh, grouped, latest)
        else:
            # Between two searches, on the event loop: no search sees it half done.
            for item in [i for i in old.rows if i not in present]:
                old.remove(item)
            for item, text in fresh.items():
                if old.texts.get(item) != text:  # a chunk read again unchanged: no tokens
                    words, day = self._document(text)
                    old.add(item, words, _chunk_text(item, text), day)
            lexical = old.compacted()
        lexical.raws = raws
        self._cache.put(namespace, Cached(version, lexical, lexical.nbytes))
        return lexical

    def _build(self, base: dict[str, tuple[list[str], str | None]], fresh: dict[str, str],
               grouped: bool, latest: datetime.date | None = None) -> _Lexical:
        """`base`: documents kept from the index before, id -> (tokens, chunk text);
        `latest`: its latest day."""
        lexical = _Lexical(grouped=grouped, latest=latest)
        for item, (words, text) in base.items():
            lexical.add(item, words, text)
        for item, text in fresh.items():
            words, day = self._document(text)
            lexical.add(item, words, _chunk_text(item, text), day)
        return lexical

    async def _conversation_texts(
            self, namespace: Namespace, old: _Lexical | None,
    ) -> tuple[str | None, set[str], dict[str, str], dict[str, str]]:
        """(version, every id present, texts to (re)tokenise by id: the turns `old` lacks and
        the chunks not stored as `old` read them, every chunk id -> as stored). A conversation
        keeps its chunks in a list; a user namespace keeps them beside the turns."""
        nk = namespace_keys(self.keys, namespace)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.get(nk.version)
            pipe.hkeys(nk.documents)
            if nk.chunks is not None:
                pipe.lrange(nk.chunks, 0, -1)
            version, turn_ids, *rest = await pipe.execute()
        raw_chunks = rest[0] if rest else []
        known = old.rows if old is not None else {}
        read_before = old.raws if old is not None else {}
        user = namespace.kind == "user"
        if user:  # its chunks are mutable: read again
            wanted = [i for i in turn_ids if i not in known or is_chunk(i)]
        else:
            wanted = [i for i in turn_ids if i not in known]
        present = set(turn_ids)
        fresh: dict[str, str] = {}
        raws: dict[str, str] = {}
        foreign = 0
        for item, raw in zip(wanted, await self.redis.hmget(nk.documents, wanted)
                             if wanted else []):
            if user and raw is not None and is_chunk(item):
                raws[item] = raw
                if read_before.get(item) == raw and item in known:
                    continue  # unchanged since the last refresh read it
            entry = json_object(self.encryption.open_or_none(namespace.tenant, raw))
            if entry is None or not isinstance(entry.get("text"), str):
                foreign += raw is not None  # None: deleted since HKEYS; not an error
                present.discard(item)
                continue
            fresh[item] = entry["text"]
        unchanged = {raw: item for item, raw in read_before.items()
                     if item in known} if raw_chunks else {}
        for raw in raw_chunks:
            if (item := unchanged.get(raw)) is not None:
                raws[item] = raw
                present.add(item)
                continue  # as the last refresh read it: neither opened nor decoded again
            chunk = json_object(self.encryption.open(namespace.tenant, raw))
            if chunk is None or not isinstance(chunk.get("text"), str) or "id" not in chunk:
                foreign += 1
                continue
            item = chunk_id(str(chunk["id"]))
            fresh[item] = chunk["text"]
            raws[item] = raw
            present.add(item)
        if foreign:
            log.warning("skipped %d unreadable memory entries in a conversation namespace",
                        foreign)
        return version, present, fresh, raws

    async def _fact_texts(self, namespace: Namespace,
                          ) -> tuple[str | None, set[str], dict[str, str]]:
        nk = namespace_keys(self.keys, namespace)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.get(nk.version)
            pipe.hgetall(nk.documents)
            version, facts = await pipe.execute()
        fresh: dict[str, str] = {}
        for field_name, raw in sorted(facts.items()):
            fact = json_object(self.encryption.open(namespace.tenant, raw))
            if fact is None or "value" not in fact:
                log.warning("skipped an unreadable fact in a facts namespace")
                continue
            fresh[field_name] = f"{fact.get('key', field_name)}: {fact['value']}"
        return version, set(fresh), fresh
