"""Request-path recall of older turns and summary chunks for a question: the conversation's
own, and — for an identified user — those of the user's other conversations.

One recall: embed the question once, search the conversation namespace densely (FAISS) and
lexically (BM25) — the lexical searches run while the question is being embedded — and, for an
identified user, the user namespace (gateway/memory/user_index.py) the same way, leaving out
the current conversation's items there (they come from the conversation namespace, which is
fresher). One fused ranking (`gateway.core.fusion`: reciprocal-rank fusion, k=20 by default,
with a mild recency weight) over: the dense hits of both namespaces merged by similarity (one
embedder, one scale), and each namespace's BM25 hits (BM25 scores of different corpora are not
on one scale; their ranks are). Then drop what the request already shows and return the best k.

Neighbours (measured on the LoCoMo dev split, bench/results/memory-ablation.md): a turn's
vector embeds it after the turn before it, so a dense hit ranks that previous turn too
(`fusion.with_context`); and each of the best k that asks something is followed by the turn
after it in its conversation (`fusion.with_successors`) — a recalled question brings its
answer (by choice every one of the best k, `successors_of="all"`). So up to 2k items come
back, best first.

Positions: an item of another conversation is placed before every item of the current one;
other conversations are ordered by when they started, oldest first, their items by their place
in them. Recalled items are shown in that order, and recency weighs by it. Without items from
other conversations every position is the item's place in the conversation, as it was.

Invariants: only the conversation's namespace and its user's namespace (identified users only)
are searched — never another user's or tenant's; no item of the current conversation comes
from the user namespace; a turn is returned with the text its entry holds (redacted,
date-anchored); an item whose id is in `exclude_ids` — or one all of whose source turns are —
is never returned; empty namespaces return [] without embedding anything; every error
propagates (the pipeline fails open around recall).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal, Sequence

import numpy as np
import redis.asyncio as aioredis

from gateway.core.compaction import render_chunk
from gateway.core.fusion import (RECENCY_WEIGHT, RRF_K, asks, fuse, with_context,
                                 with_successors)
from gateway.core.ids import ConversationKey
from gateway.core.recall import Recollection
from gateway.core.topics import boost_same_topic, same_topic
from gateway.memory.chunk_store import chunk_from_json
from gateway.memory.embedding import EmbeddingService
from gateway.memory.entry_cache import Entries, EntryCache, Link
from gateway.memory.keys import MemoryKeySpace
from gateway.memory.lexical_index import CHUNK_PREFIX, chunk_id
from gateway.memory.ports import LexicalIndex, Namespace, VectorIndex
from gateway.memory.user_index import SEPARATOR, Synced, qualified_id, split_id
from gateway.store.codec import json_object
from gateway.store.crypto import NO_ENCRYPTION, Encryption

Hits = list[tuple[str, float]]
SuccessorsOf = Literal["questions", "all"]


@dataclass(frozen=True, slots=True)
class Namespaces:
    """What one recall searches, and each namespace's version counter read at the same time
    (the indexes compare it with what they cached instead of reading it again)."""

    conversation: Namespace | None
    """None: the conversation has no indexed turn or chunk yet."""
    conversation_version: str | None
    user: Namespace | None
    """None: an anonymous user, nothing in the user's recall index yet, or only the current
    conversation there (whose items the user namespace's search leaves out anyway)."""
    user_version: str | None


def queue_namespaces(pipe: Any, keys: MemoryKeySpace, key: ConversationKey) -> None:
    """Queue the reads `read_namespaces` decodes (2 commands, 6 for an identified user)."""
    ck = keys.conversation(key)
    pipe.exists(ck.turns, ck.chunks)
    pipe.get(ck.version)
    if key.identified:
        uk = keys.user(key.tenant, key.user)
        pipe.exists(uk.recall)
        pipe.get(uk.recall_version)
        pipe.hlen(uk.recall_synced)
        pipe.hexists(uk.recall_synced, key.conversation)


def read_namespaces(key: ConversationKey, replies: Sequence[Any]) -> Namespaces:
    own, own_version, *user = replies
    # A user whose recall index mirrors only this conversation (its one synced conversation
    # is this one) has nothing there to recall: searching it would find this conversation's
    # items and leave them all out. A conversation being mirrored for the first time is not
    # synced yet (`recall_synced` is written last): it is searched from its next request on.
    has_user = bool(user) and bool(user[0]) and not (int(user[2]) == 1 and bool(user[3]))
    return Namespaces(Namespace.of_conversation(key) if own else None, own_version,
                      Namespace.of_user(key.tenant, key.user) if has_user else None,
                      user[1] if has_user else None)


class Recaller:
    def __init__(self, embedding: EmbeddingService, vector_index: VectorIndex,
                 lexical_index: LexicalIndex, redis: aioredis.Redis,
                 keys: MemoryKeySpace = MemoryKeySpace(), *, rrf_k: int = RRF_K,
                 recency_weight: float = RECENCY_WEIGHT, depth: int | None = None,
                 encryption: Encryption = NO_ENCRYPTION):
        """`depth`: how many hits each search contributes to the fusion (default: the k of
        the call, at least 20); `encryption` opens the stored entries."""
        self.encryption = encryption
        self.embedding = embedding
        self.vector_index = vector_index
        self.lexical_index = lexical_index
        self.redis = redis
        self.keys = keys
        self.rrf_k = rrf_k
        self.recency_weight = recency_weight
        self.depth = depth
        self.entries = EntryCache()

    async def recall(self, key: ConversationKey, query: str, *, k: int = 50,
                     exclude_ids: frozenset[str] = frozenset(),
                     query_vector: np.ndarray | None = None, successors: bool = True,
                     successors_of: SuccessorsOf = "questions", rrf_k: int | None = None,
                     namespaces: Namespaces | None = None, topic_start: int | None = None,
                     topic_boost: float = 0.0) -> list[Recollection]:
        """The k items most relevant to `query`, best first: of the conversation, and of the
        user's other conversations when the user is identified. `query_vector`: the query's
        embedding, when the caller already has it; `successors`: follow each hit with the
        turn after it — every hit (`successors_of="all"`) or only the hits that ask something
        ("questions", `gateway.core.fusion.asks`); `rrf_k`: the fusion's k (default: the
        recaller's); `namespaces`: what to search, when the caller read it with its other
        reads (`queue_namespaces`); `topic_start`, `topic_boost`: the conversation's items from
        `topic_start` on (its current topic) score 1 + `topic_boost` times higher
        (`core.topics`)."""
        if k <= 0:
            return []
        if namespaces is None:
            async with self.redis.pipeline(transaction=False) as pipe:
                queue_namespaces(pipe, self.keys, key)
                namespaces = read_namespaces(key, await pipe.execute())
        conversation, user = namespaces.conversation, namespaces.user
        if conversation is None and user is None:
            return []
        # Excluded items would be dropped after fusion: search deeper so k remain.
        depth = max(self.depth or max(k, 20), k) + len(exclude_ids)

        async def dense() -> tuple[Hits, Hits]:
            vector = query_vector if query_vector is not None \
                else await self.embedding.embed_query_one(query)
            own, others = await asyncio.gather(
                self.vector_index.search(conversation, vector, depth,
                                         version=namespaces.conversation_version)
                if conversation else _no_hits(),
                self.vector_index.search(user, vector, depth, excluding=key.conversation,
                                         version=namespaces.user_version)
                if user else _no_hits())
            return own, others

        (own_dense, user_dense), own_lexical, user_lexical = await asyncio.gather(
            dense(),
            self.lexical_index.search(conversation, query, depth,
                                      version=namespaces.conversation_version)
            if conversation else _no_hits(),
            self.lexical_index.search(user, query, depth, excluding=key.conversation,
                                      version=namespaces.user_version)
            if user else _no_hits())
        own_version = namespaces.conversation_version
        own_items, user_items = await asyncio.gather(
            self._items(key, _ids(own_dense, own_lexical), version=own_version),
            self._user_items(key, _ids(user_dense, user_lexical),
                             version=namespaces.user_version))
        # A dense hit also ranks the turn before it (its vector holds that turn too), and
        # each of the best k brings the turn after it: fuse first, then fetch (one more
        # round trip) only the entries of those the best k need that are not read yet.
        links = own_items.links | user_items.links
        found = own_items.items.keys() | {r.id for _, _, r in user_items.placed}
        first = _usable(_placed(own_items.items, user_items.placed), exclude_ids)
        previous = {i: p for i, link in links.items() if (p := link.previous) is not None}
        dense_hits = sorted(own_dense + user_dense, key=lambda hit: -hit[1])
        fused = fuse([[i for i in with_context([i for i, _ in dense_hits], previous)
                       if i in first or (i not in found and i not in exclude_ids)],
                      [i for i, _ in own_lexical if i in first],
                      [i for i, _ in user_lexical if i in first]],
                     {i: item.position for i, item in first.items()},
                     k=rrf_k or self.rrf_k, recency_weight=self.recency_weight)
        fused = _same_topic_first(fused, own_items.items, topic_start, topic_boost)[:k]
        following = {i: links[i].following for i, _ in fused
                     if successors and i in links and links[i].following is not None
                     and (successors_of == "all" or (i in first and asks(first[i].text)))}
        wanted = [i for i in dict.fromkeys([i for i, _ in fused] + list(following.values()))
                  if i not in found]
        own_more, user_more = await asyncio.gather(
            self._items(key, [i for i in wanted if not _qualified(i)], linked=False,
                        version=own_version),
            self._user_items(key, [i for i in wanted if _qualified(i)], linked=False,
                             version=namespaces.user_version))
        items = _usable(_placed(own_items.items | own_more.items,
                                user_items.placed + user_more.placed), exclude_ids)
        return [_scored(items[i], score) for i, score in with_successors(fused, following)
                if i in items]

    async def _user_items(self, key: ConversationKey, candidates: list[str], *,
                          linked: bool = True, version: str | None = None) -> _Others:
        """The user-namespace items behind candidate ids, each with when its conversation
        started and its conversation (for ordering), and (if `linked`) the qualified ids of
        the turns before and after each turn. The current conversation's are left out (the
        indexes already leave them out; this holds even for a stale cached index). `version`:
        the user namespace's version counter as the request read it (entries known at it come
        from the in-process cache)."""
        split = {i: split_id(i) for i in candidates}
        candidates = [i for i in candidates if split[i][0] != key.conversation]
        if not candidates:
            return _Others([], {})
        namespace = Namespace.of_user(key.tenant, key.user)
        known = self.entries.entries(namespace, version)
        if known is None:
            known = Entries("")  # no version to key by: read everything, keep nothing
        needed = [i for i in candidates if (hit := known.turns.get(i)) is None
                  or (linked and hit[0].kind == "turn" and hit[1] is None)]
        if needed or any(split[i][0] not in known.started for i in candidates):
            await self._read_user(key, known, needed, split, linked=linked)
            if version is not None:
                self.entries.grew(namespace, known)
        found, links = [], {}
        for item_id in candidates:
            if (hit := known.turns.get(item_id)) is None:
                continue
            conversation = split[item_id][0]
            found.append((known.started.get(conversation, 0.0), conversation, hit[0]))
            if linked and hit[1] is not None:
                links[item_id] = hit[1]
        return _Others(found, links)

    async def _read_user(self, key: ConversationKey, known: Entries, item_ids: list[str],
                         split: dict[str, tuple[str, str]], *, linked: bool) -> None:
        """Read into `known` the user-namespace entries of `item_ids` (turns with their links
        if `linked`) and when each of their conversations started."""
        uk = self.keys.user(key.tenant, key.user)
        by_conversation: dict[str, list[str]] = {}
        for i in item_ids:
            by_conversation.setdefault(split[i][0], []).append(i)
        conversations = sorted(set(by_conversation) | {
            c for c, _ in split.values() if c != key.conversation and c not in known.started})
        async with self.redis.pipeline(transaction=False) as pipe:
            if conversations:
                pipe.hmget(uk.recall_synced, conversations)
            if item_ids:
                pipe.hmget(uk.recall, item_ids)
            if linked:  # the user's own conversations: same tenant, same user
                for c in by_conversation:
                    pipe.hmget(self.keys.conversation(
                        ConversationKey(key.tenant, key.user, c)).following,
                        [split[i][1] for i in by_conversation[c]])
            results = list(await pipe.execute())
        raw_synced = results.pop(0) if conversations else []
        raw_items = results.pop(0) if item_ids else []
        raw_following = results  # one reply per conversation of `by_conversation`, if linked
        known.started.update({c: synced.started_at if (synced := Synced.parse(raw)) else 0.0
                              for c, raw in zip(conversations, raw_synced)})
        following: dict[str, str] = {}
        for c, raw_ids in zip(by_conversation, raw_following):
            following.update({i: qualified_id(c, f)
                              for i, f in zip(by_conversation[c], raw_ids) if f})
        for item_id, raw in zip(item_ids, raw_items):
            entry = json_object(self.encryption.open_or_none(key.tenant, raw))
            if entry is None or not isinstance(entry.get("text"), str) or not entry["text"] \
                    or entry.get("kind") not in ("turn", "chunk"):
                continue  # gone since the index was built, or unreadable: left out
            conversation = split[item_id][0]
            link = None
            if linked and entry["kind"] == "turn":
                before = entry.get("prev")
                link = Link(qualified_id(conversation, before) if isinstance(before, str)
                            else None, following.get(item_id))
            known.turns[item_id] = (Recollection(
                entry["kind"], item_id, entry["text"],
                tuple(str(s) for s in entry.get("source_ids") or ()),
                int(entry.get("position", -1)), 0.0), link)

    async def _items(self, key: ConversationKey, candidates: list[str], *,
                     linked: bool = True, version: str | None = None) -> _Own:
        """The stored items of the conversation behind candidate ids (score 0), and (if
        `linked`) the ids of the turns before and after each turn. Ids whose entry is gone
        (deleted since the index was built) or unreadable are left out. `version`: the
        namespace's version counter as the request read it — items known at that version
        come from the in-process cache (gateway/memory/entry_cache.py), the rest are read."""
        if not candidates:
            return _Own({}, {})
        namespace = Namespace.of_conversation(key)
        known = self.entries.entries(namespace, version)
        if known is None:
            known = Entries("")  # no version to key by: read everything, keep nothing
        turn_ids, link_ids = [], []
        for i in candidates:
            if i.startswith(CHUNK_PREFIX):
                continue
            if (hit := known.turns.get(i)) is None:
                turn_ids.append(i)
            elif linked and hit[1] is None:
                # A turn carried over new turns needs only its successor; one read without
                # its link needs its entry again (the turn before it is in the entry).
                (link_ids if i in known.unlinked else turn_ids).append(i)
        wants_chunks = known.chunks is None and any(i.startswith(CHUNK_PREFIX)
                                                    for i in candidates)
        if turn_ids or link_ids or wants_chunks:
            await self._read(key, known, turn_ids, linked=linked, chunks=wants_chunks,
                             link_ids=link_ids)
            if version is not None:
                self.entries.grew(namespace, known)
        items: dict[str, Recollection] = {}
        links: dict[str, Link] = {}
        for item_id in candidates:
            if item_id.startswith(CHUNK_PREFIX):
                if (chunk := (known.chunks or {}).get(item_id)) is not None:
                    items[item_id] = chunk
            elif (turn := known.turns.get(item_id)) is not None:
                items[item_id] = turn[0]
                if linked and turn[1] is not None:
                    links[item_id] = turn[1]
        return _Own(items, links)

    async def _read(self, key: ConversationKey, known: Entries, turn_ids: list[str], *,
                    linked: bool, chunks: bool, link_ids: Sequence[str] = ()) -> None:
        """Read the entries of `turn_ids` (with their links if `linked`), the successors of
        the known turns `link_ids` (in `known.unlinked`), and, if `chunks`, every summary
        chunk, into `known`."""
        ck = self.keys.conversation(key)
        async with self.redis.pipeline(transaction=False) as pipe:
            if turn_ids:
                pipe.hmget(ck.turns, turn_ids)
            if (turn_ids and linked) or link_ids:
                pipe.hmget(ck.following, [*(turn_ids if linked else ()), *link_ids])
            if chunks:
                pipe.lrange(ck.chunks, 0, -1)
            results = list(await pipe.execute())
        raw_turns = results.pop(0) if turn_ids else []
        following = results.pop(0) if (turn_ids and linked) or link_ids else []
        raw_following = following[:len(turn_ids)] if linked else [None] * len(turn_ids)
        for item_id, after in zip(link_ids, following[len(turn_ids) if linked else 0:]):
            known.turns[item_id] = (known.turns[item_id][0],
                                    Link(known.unlinked.pop(item_id), after))
        for item_id, raw, after in zip(turn_ids, raw_turns, raw_following):
            entry = json_object(self.encryption.open_or_none(key.tenant, raw))
            if entry is not None and isinstance(entry.get("text"), str):
                before = entry.get("prev")
                if linked:
                    known.unlinked.pop(item_id, None)
                known.turns[item_id] = (
                    Recollection("turn", item_id, entry["text"], (item_id,),
                                 int(entry.get("position", -1)), 0.0),
                    Link(before if isinstance(before, str) else None, after) if linked
                    else None)
        if chunks:
            known.chunks = {}
            for raw in results.pop(0):
                try:
                    chunk = chunk_from_json(self.encryption.open(key.tenant, raw))
                except ValueError:
                    continue  # unreadable: left out, like a vanished turn
                text = render_chunk(chunk)  # with its date span; "" once deleted by the user
                if text:
                    known.chunks[chunk_id(chunk.id)] = Recollection(
                        "chunk", chunk_id(chunk.id), text, chunk.source_ids,
                        chunk.first_position, 0.0)


@dataclass(frozen=True, slots=True)
class _Own:
    items: dict[str, Recollection]
    links: dict[str, Link]


@dataclass(frozen=True, slots=True)
class _Others:
    placed: list[tuple[float, str, Recollection]]
    """(when its conversation started, the conversation, the item)."""
    links: dict[str, Link]


def _same_topic_first(fused: list[tuple[str, float]], own: dict[str, Recollection],
                      topic_start: int | None, boost: float) -> list[tuple[str, float]]:
    """The fused ranking with the current topic's items boosted (by their place in this
    conversation: `own` holds the places before `_placed` moves them)."""
    if topic_start is None or boost == 0:
        return fused
    same = same_topic({i: r.position for i, r in own.items()}, topic_start)
    return boost_same_topic(fused, same, boost)


def _qualified(item_id: str) -> bool:
    return SEPARATOR in item_id


async def _no_hits() -> Hits:
    return []


def _ids(*hit_lists: Hits) -> list[str]:
    return list(dict.fromkeys(i for hits in hit_lists for i, _ in hits))


def _placed(own: dict[str, Recollection],
            others: list[tuple[float, str, Recollection]]) -> dict[str, Recollection]:
    """Every candidate with its place in one order: the items of other conversations first
    (their conversations oldest first, then by place), then the current conversation's."""
    if not others:
        return own
    ordered = sorted(others, key=lambda o: (o[0], o[1], o[2].position, o[2].id))
    placed = {r.id: _at(r, rank) for rank, (_, _, r) in enumerate(ordered)}
    offset = len(ordered)
    placed.update({i: _at(r, r.position + offset if r.position >= 0 else -1)
                   for i, r in own.items()})
    return placed


def _at(item: Recollection, position: int) -> Recollection:
    return Recollection(item.kind, item.id, item.text, item.source_ids, position, item.score)


def _usable(items: dict[str, Recollection],
            exclude_ids: frozenset[str]) -> dict[str, Recollection]:
    if not exclude_ids:
        return items
    return {i: item for i, item in items.items() if not _excluded(item, exclude_ids)}


def _excluded(item: Recollection, exclude_ids: frozenset[str]) -> bool:
    # An item that only stems from turns the request shows verbatim adds nothing.
    return item.id in exclude_ids or (bool(item.source_ids)
                                      and exclude_ids.issuperset(item.source_ids))


def _scored(item: Recollection, score: float) -> Recollection:
    return Recollection(item.kind, item.id, item.text, item.source_ids, item.position, score)
