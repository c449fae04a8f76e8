"""Request-path recall of older turns and summary chunks for a question: the conversation's
own, and — for an identified user — those of the user's other conversations.

One recall: embed the question once, search the conversation namespace densely (FAISS) and
lexically (BM25) — the lexical searches run while the question is being embedded — and, for an
identified user, the user namespace (gateway/memory/jobs/user_index.py) the same way, leaving out
the current conversation's items there (they come from the conversation namespace, which is
fresher). One fused ranking (`gateway.core.recall.fusion`: reciprocal-rank fusion, k=20 by default,
with a mild recency weight) over: the dense hits of both namespaces merged by similarity (one
embedder, one scale), and each namespace's BM25 hits (BM25 scores of different corpora are not
on one scale; their ranks are). Then, with a learned ranking (`gateway.core.recall.ranking`, the
tenants' default), the fused candidates' turns are re-ordered by it: each search then
contributes at least `ranking.DEPTH` hits, the candidates not read yet (turns before dense
hits) are read, and at most `ranking.CANDIDATES` are weighed; a topic boost applies to the
order it gives. Then drop what the request already shows and return the best k, each with
its absolute relevance (`gateway.core.recall.relevance`: its dense similarity or its
neighbours'). Summary
chunks are candidates unless `chunks` is false (the tenants' default: bench/README.md, "Learned
ranking"); then every search is of turns only, so each still contributes its depth of turns.

Neighbours (what they are worth on the LoCoMo dev split: bench/results/memory-ablation.md): a turn's
vector embeds it after the turn before it, so a dense hit ranks that previous turn too
(`fusion.with_context`); and each of the best k that asks something is followed by the turn
after it in its conversation (`fusion.with_successors`) — a recalled question brings its
answer (by choice every one of the best k, `successors_of="all"`). So up to 2k items come
back, best first.

Positions: an item of another conversation is placed before every item of the current one;
other conversations are ordered by when they started, oldest first, their items by their place
in them. Recalled items are shown in that order, and recency weighs by it. Without items from
other conversations every position is the item's place in the conversation, as it was.

The steps from the hits to the recollections are `gateway.core.recall.assembly`'s (pure; the
offline simulation, bench/locomo/simulate.py, runs the same); this module searches and reads
the entries they need between them.

Invariants: only the conversation's namespace and its user's namespace (identified users only)
are searched — never another user's or tenant's; no item of the current conversation comes
from the user namespace; a turn is returned with the text its entry holds (redacted,
date-anchored); an item whose id is in `exclude_ids` — or one all of whose source turns are —
is never returned; empty namespaces return [] without embedding anything; every error
propagates (the pipeline fails open around recall).
"""

from __future__ import annotations

import asyncio
import datetime
from dataclasses import dataclass
from typing import Any, Awaitable, Sequence, TypeVar

import numpy as np
import redis.asyncio as aioredis

from gateway.core.ids import ConversationKey
from gateway.core.recall.assembly import (SuccessorsOf, adjacent, best, fused_order,
                                          recollections)
from gateway.core.recall.fusion import RECENCY_WEIGHT, RRF_K
from gateway.core.recall.ranking import DEPTH as RANKER_DEPTH
from gateway.core.recall.ranking import Ranker
from gateway.core.recall.recollection import Recollection
from gateway.memory.search.embedding import EmbeddingService
from gateway.memory.records.keys import MemoryKeySpace
from gateway.memory.ports import LexicalIndex, Namespace, VectorIndex
from gateway.memory.recall.entries import EntryReader, OtherItems, OwnItems
from gateway.memory.records.user_recall import SEPARATOR
from gateway.store.encryption.crypto import NO_ENCRYPTION, Encryption

Hits = list[tuple[str, float]]
A = TypeVar("A")
B = TypeVar("B")


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


def queue_namespaces(pipe: Any, keys: MemoryKeySpace, key: ConversationKey, *,
                     user: bool = True) -> None:
    """Queue the reads `read_namespaces` decodes (2 commands, 6 for an identified user);
    `user`: False keeps recall within the conversation (the tenant's `memory.scope`)."""
    ck = keys.conversation(key)
    pipe.exists(ck.turns, ck.chunks)
    pipe.get(ck.version)
    if key.identified and user:
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
        self.embedding = embedding
        self.vector_index = vector_index
        self.lexical_index = lexical_index
        self.redis = redis
        self.keys = keys
        self.rrf_k = rrf_k
        self.recency_weight = recency_weight
        self.depth = depth
        self.reader = EntryReader(redis, keys, encryption=encryption)

    async def recall(self, key: ConversationKey, query: str, *, k: int = 50,
                     exclude_ids: frozenset[str] = frozenset(),
                     query_vector: np.ndarray | None = None, successors: bool = True,
                     successors_of: SuccessorsOf = "questions", rrf_k: int | None = None,
                     namespaces: Namespaces | None = None, topic_start: int | None = None,
                     topic_boost: float = 0.0, ranker: Ranker | None = None,
                     chunks: bool = True, tool_results: bool = False,
                     today: datetime.date | None = None) -> list[Recollection]:
        """The k items most relevant to `query`, best first: of the conversation, and of the
        user's other conversations when the user is identified. `query_vector`: the query's
        embedding, when the caller already has it; `successors`: follow each hit with the
        turn after it — every hit (`successors_of="all"`) or only the hits that ask something
        ("questions", `gateway.core.recall.fusion.asks`); `rrf_k`: the fusion's k (default: the
        recaller's); `namespaces`: what to search, when the caller read it with its other
        reads (`queue_namespaces`); `topic_start`, `topic_boost`: the conversation's items from
        `topic_start` on (its current topic) score 1 + `topic_boost` times higher
        (`core.topics`); `ranker`: re-rank the fused candidates' turns (`core.ranking`), each
        search then contributing at least `ranking.DEPTH` hits; `chunks`: false, summary
        chunks are not recalled (turns only); `tool_results`: tool results of the user's other
        conversations may be recalled (`EntryReader.others`); `today`: the day the query's
        relative days count from (None: the latest day each namespace holds)."""
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
        depth = max(self.depth or max(k, 20), k, RANKER_DEPTH if ranker else 0) \
            + len(exclude_ids)

        async def dense() -> tuple[Hits, Hits]:
            vector = query_vector if query_vector is not None \
                else await self.embedding.embed_query_one(query)
            return await _both(
                self.vector_index.search(conversation, vector, depth, turns_only=not chunks,
                                         version=namespaces.conversation_version)
                if conversation else None,
                self.vector_index.search(user, vector, depth, excluding=key.conversation,
                                         turns_only=not chunks,
                                         version=namespaces.user_version)
                if user else None, ([], []))

        (own_dense, user_dense), (own_lexical, user_lexical) = await _both(
            dense(),
            _both(self.lexical_index.search(conversation, query, depth, turns_only=not chunks,
                                            version=namespaces.conversation_version,
                                            today=today)
                  if conversation else None,
                  self.lexical_index.search(user, query, depth, excluding=key.conversation,
                                            turns_only=not chunks,
                                            version=namespaces.user_version, today=today)
                  if user else None, ([], [])), (([], []), ([], [])))
        own_version = namespaces.conversation_version
        own_items, user_items = await self._items(key, _ids(own_dense, own_lexical),
                                                  _ids(user_dense, user_lexical), own_version,
                                                  namespaces.user_version, tool_results)
        # A dense hit also ranks the turn before it (its vector holds that turn too), and
        # each of the best k brings the turn after it: fuse first, then fetch (one more
        # round trip) only the entries of those the best k need that are not read yet.
        links = own_items.links | user_items.links
        found = own_items.items.keys() | {r.id for _, _, r in user_items.placed}
        first = _usable(_placed(own_items.items, user_items.placed), exclude_ids)
        previous = {i: p for i, link in links.items() if (p := link.previous) is not None}
        fused = fused_order(own_dense + user_dense, (own_lexical, user_lexical), first,
                            previous, read=found, excluded=exclude_ids,
                            ranked=ranker is not None, rrf_k=rrf_k or self.rrf_k,
                            recency_weight=self.recency_weight)
        if ranker is not None:
            own_more, user_more = await self._unread(key, namespaces, fused.order, found,
                                                     exclude_ids, tool_results)
            own_items = OwnItems(own_items.items | own_more.items, own_items.links)
            user_items = OtherItems(user_items.placed + user_more.placed, user_items.links)
            found = found | own_more.items.keys() | {r.id for _, _, r in user_more.placed}
            links |= own_more.links | user_more.links
            first = _usable(_placed(own_items.items, user_items.placed), exclude_ids)
        chosen = best(query, fused, first, links, top_k=k, ranker=ranker,
                      successors=successors, successors_of=successors_of,
                      topic_positions={i: r.position for i, r in own_items.items.items()}
                      if topic_start is not None and topic_boost else None,
                      topic_start=topic_start, topic_boost=topic_boost, today=today)
        wanted = [i for i in dict.fromkeys([i for i, _ in chosen.ranked]
                                           + list(chosen.following.values()))
                  if i not in found]
        own_more, user_more = await self._items(
            key, [i for i in wanted if not _qualified(i)], [i for i in wanted if _qualified(i)],
            own_version, namespaces.user_version, tool_results, linked=False)
        items = _usable(_placed(own_items.items | own_more.items,
                                user_items.placed + user_more.placed), exclude_ids)
        # Each item re-made once, with its score and its relevance (None: unknown).
        return recollections(chosen, items, fused.similarity, adjacent(links))

    async def _unread(self, key: ConversationKey, namespaces: Namespaces,
                      fused: list[tuple[str, float]], found: set[str],
                      exclude_ids: frozenset[str],
                      tool_results: bool) -> tuple[OwnItems, OtherItems]:
        """The fused candidates not read yet (the turns before dense hits), with their links:
        the ranking weighs every candidate's text and neighbours."""
        unread = [i for i, _ in fused if i not in found and i not in exclude_ids]
        return await self._items(key, [i for i in unread if not _qualified(i)],
                                 [i for i in unread if _qualified(i)],
                                 namespaces.conversation_version, namespaces.user_version,
                                 tool_results)

    async def _items(self, key: ConversationKey, own: list[str], others: list[str],
                     own_version: str | None, user_version: str | None, tool_results: bool,
                     *, linked: bool = True) -> tuple[OwnItems, OtherItems]:
        """The entries behind the conversation's candidate ids (`own`) and those of the user's
        other conversations (`others`, qualified ids), each list read only when it holds
        one."""
        return await _both(
            self.reader.own(key, own, linked=linked, version=own_version) if own else None,
            self.reader.others(key, others, linked=linked, version=user_version,
                               tool_results=tool_results) if others else None,
            (OwnItems({}, {}), OtherItems([], {})))


def _qualified(item_id: str) -> bool:
    return SEPARATOR in item_id


async def _both(first: Awaitable[A] | None, second: Awaitable[B] | None,
                absent: tuple[A, B]) -> tuple[A, B]:
    """`first` and `second` awaited side by side; one that is None gives its place in
    `absent` instead, and a lone awaitable is awaited as it is (no task is made for it)."""
    if first is not None and second is not None:
        one, two = await asyncio.gather(first, second)
        return one, two
    return (await first if first is not None else absent[0],
            await second if second is not None else absent[1])


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
    return item.changed(position=position)


def _usable(items: dict[str, Recollection],
            exclude_ids: frozenset[str]) -> dict[str, Recollection]:
    if not exclude_ids:
        return items
    return {i: item for i, item in items.items() if not _excluded(item, exclude_ids)}


def _excluded(item: Recollection, exclude_ids: frozenset[str]) -> bool:
    # An item that only stems from turns the request shows verbatim adds nothing.
    return item.id in exclude_ids or (bool(item.source_ids)
                                      and exclude_ids.issuperset(item.source_ids))

