"""Memory on the request path: what the memory layers offer for one request.

Only reads: the user's switches, the conversation's summary chunks, pinned messages and
current topic, the user's profile, and a search (one query embedding, shared) over the conversation's older turns
and chunks and over the user's long-term facts. Everything is written by the memory worker,
off the request path — except the pins a client marks, written once its turn is enqueued
(`pin`).
The caller fails open around `context_for`: memory that cannot be read leaves the request as
the transcript alone would make it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Mapping

from gateway.config.context import ContextConfig
from gateway.config.memory import TenantMemoryConfig
from gateway.core.memory.compaction import SummaryChunk, render_chunk
from gateway.core.ids import ConversationKey
from gateway.core.context.blocks import MemoryContext, PinnedMessage
from gateway.core.memory.profile import Profile, render_profile
from gateway.core.recall.ranking import Ranker
from gateway.core.recall.recollection import Recollection
from gateway.core.recall.need import Need, asked, memory_need
from gateway.core.recall.relevance import above_floor
from gateway.core.memory.topics import TopicSegment
from gateway.memory.records.chunk_store import ChunkStore
from gateway.memory.search.embedding import EmbeddingService
from gateway.memory.records.facts_store import FactStore
from gateway.memory.records.pin_store import PinStore
from gateway.memory.ports import Embedder, VectorIndex
from gateway.memory.records.profile_store import ProfileStore
from gateway.memory.recall.recaller import (Namespaces, Recaller, SuccessorsOf, queue_namespaces,
                                     read_namespaces)
from gateway.memory.records.settings_store import SettingsStore
from gateway.memory.records.topic_store import TopicStore


@dataclass(frozen=True, slots=True)
class RecallSettings:
    """A tenant's recall, as the request path reads it. Built only by `from_config`: every
    value comes from the tenant's config (its defaults are the config model's), the embedder
    filling in the thresholds the tenant leaves unset."""

    top_k: int
    """Older turns and chunks offered to the rewrite (`memory.recall_top_k`; 0: no search)."""
    facts_k: int
    """The user's facts offered with each request, most relevant first (`memory.facts_k`;
    0: none)."""
    successors: bool
    """A recalled turn brings the turn after it (`memory.recall_successors`)."""
    successors_of: SuccessorsOf
    """Which recalled turns bring the turn after them (`memory.recall_successors_of`)."""
    summaries: bool
    """Read the conversation's summary chunks for the summary block (false when the tenant's
    `context.summary_share` is 0: the block could never be shown)."""
    rrf_k: int
    """The k of the reciprocal-rank fusion (`memory.recall_rrf_k`)."""
    ranker: Ranker | None
    """The learned re-ranking of the fused candidates' turns (None: the fused order;
    `memory.recall_ranking` and `memory.recall_ranker_weights`)."""
    chunks: bool
    """Recall summary chunks beside turns (`memory.recall_chunks`)."""
    pins: bool
    """Read the conversation's pinned messages (false when the tenant's
    `context.pinned_share` is 0: the block could never be shown)."""
    topics: bool
    """Read the conversation's current topic (`memory.topics.enabled`)."""
    topic_boost: float
    """Recall scores of the current topic's items are multiplied by 1 + this
    (`memory.topics.boost`)."""
    relevance_floor: float | None
    """Recalled turns and chunks less relevant than this are not offered
    (gateway/core/recall/relevance.py; None: all are)."""
    relevance_gate: float | None
    """When no recalled turn or chunk is this relevant, none is offered (None: no gate)."""
    per_relevant: int
    """With a gate, at most this many recalled items per one that reaches it (0: no cap;
    `memory.recall_items_per_relevant`)."""
    across_conversations: bool
    """An identified user's memory from their other conversations — recall from them, the
    profile, facts — is offered (`memory.scope: user`); False: only the conversation's own
    (`scope: conversation`)."""
    tool_results: bool
    """Tool results of the user's other conversations may be recalled
    (`memory.recall_tool_results`); a conversation's own always may."""

    @classmethod
    def from_config(cls, memory: TenantMemoryConfig, context: ContextConfig,
                    embedder: Embedder) -> RecallSettings:
        """A tenant's recall from its `memory` and `context` sections; the floor and the gate
        are the tenant's own if set (-1: none), else the embedder's."""
        return cls(top_k=memory.recall_top_k, facts_k=memory.facts_k,
                   successors=memory.recall_successors,
                   successors_of=memory.recall_successors_of,
                   summaries=context.summary_share > 0,
                   rrf_k=memory.recall_rrf_k,
                   ranker=memory.ranker(),
                   chunks=memory.recall_chunks,
                   pins=context.pinned_share > 0,
                   topics=memory.topics.enabled,
                   topic_boost=memory.topics.boost,
                   relevance_floor=_own(memory.recall_relevance_floor, embedder.relevance_floor),
                   relevance_gate=_own(memory.recall_relevance_gate, embedder.relevance_gate),
                   per_relevant=memory.recall_items_per_relevant,
                   across_conversations=memory.scope == "user",
                   tool_results=memory.recall_tool_results)


def _own(tenant: float | None, embedder: float | None) -> float | None:
    """A tenant's recall threshold: its own if set (-1: none), else the embedder's."""
    value = tenant if tenant is not None else embedder
    return None if value is None or value <= -1 else value


@dataclass(frozen=True, slots=True)
class MemorySnapshot:
    """A request's first memory reads (MemoryService.snapshot)."""

    memory: bool
    """The user's switch: false, nothing is recalled or shown."""
    profile: Profile | None
    """None for an anonymous user."""
    chunks: tuple[SummaryChunk, ...]
    """Empty when the tenant's summary block has no share (not read)."""
    namespaces: Namespaces
    pinned: tuple[PinnedMessage, ...] = ()
    """Empty when the tenant shows no pins (not read)."""
    topic: TopicSegment | None = None
    """The conversation's current topic (None: not tracked, or none yet)."""
    query: str = ""
    """The question `need` was decided for."""
    need: Need | None = None
    """What `query` asks of recall (`search_need`); None: no search for it."""


class MemoryService:
    def __init__(self, *, embedding: EmbeddingService, recaller: Recaller,
                 vector_index: VectorIndex, chunks: ChunkStore, profiles: ProfileStore,
                 settings: SettingsStore, facts: Mapping[str, FactStore],
                 pins: PinStore | None = None, topics: TopicStore | None = None):
        self.embedding = embedding
        self.recaller = recaller
        self.vector_index = vector_index
        self.chunks = chunks
        self.profiles = profiles
        self.settings = settings
        self.facts = facts
        """One fact store per tenant: caps and decay are the tenant's policy."""
        self.pins = pins or PinStore(recaller.redis, recaller.keys)
        self.topics = topics or TopicStore(recaller.redis, recaller.keys)

    async def snapshot(self, key: ConversationKey, recall: RecallSettings,
                       query: str = "") -> MemorySnapshot:
        """Every read a request's memory starts from, in one round trip: the user's switches
        and profile, the summary chunks (when shown), the pinned messages (when shown), and
        which namespaces recall searches,
        with their version counters. The pipeline runs it beside loading the transcript.

        `query`: the question as the client's messages show it; what it asks of recall
        (`search_need`) is decided here, and its embedding is made by `context_for` only when
        a search runs (why not here: docs/decisions.md, "The query is embedded when recall
        runs")."""
        need = search_need(query, recall)
        user = reads_user_memory(key, recall)
        async with self.recaller.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(self.settings.key(key.tenant, key.user))
            if user:
                pipe.hgetall(self.profiles.key(key.tenant, key.user))
            if recall.summaries:
                pipe.lrange(self.chunks.key(key), 0, -1)
            if recall.pins:
                pipe.hgetall(self.pins.key(key))
            if recall.topics:  # one small field, in the same round trip
                self.topics.queue_current(pipe, key)
            queue_namespaces(pipe, self.recaller.keys, key, user=user)
            replies = list(await pipe.execute())
        settings = self.settings.parse(replies.pop(0))
        profile = self.profiles.parse(key.tenant, key.user, replies.pop(0)) \
            if user else None
        chunks = self.chunks.parse(replies.pop(0), key) if recall.summaries else ()
        pinned = self.pins.parse(replies.pop(0), key) if recall.pins else ()
        topic = self.topics.parse_current(key.tenant, replies.pop(0)) if recall.topics else None
        return MemorySnapshot(settings.memory, profile, chunks, read_namespaces(key, replies),
                              pinned, topic, query, need)

    async def context_for(self, key: ConversationKey, query: str, recall: RecallSettings,
                          snapshot: MemorySnapshot | None = None, *,
                          own: bool = True) -> MemoryContext:
        """What memory offers for this request; `snapshot`: from `snapshot()`, when the caller
        read it already (else read here); `own`: false, recall leaves the conversation's own
        turns and chunks out (the request shows them all: gateway/core/context/whole.py) and
        searches only outside it — the user's other conversations, facts."""
        if snapshot is None:
            snapshot = await self.snapshot(key, recall)
        if not snapshot.memory:
            return MemoryContext()
        recalled = await self._recall(key, query, recall, snapshot, own)
        chunks = snapshot.chunks
        last = chunks[-1].source_ids[-1] if chunks and chunks[-1].source_ids else None
        return MemoryContext(summary_chunks=tuple(t for t in map(render_chunk, chunks) if t),
                             profile=render_profile(snapshot.profile)
                             if snapshot.profile else None,
                             # No other conversation of the user is indexed: the profile
                             # was learned from this one.
                             profile_elsewhere=snapshot.namespaces.user is not None,
                             recalled=recalled, summarized_through=last,
                             pinned=snapshot.pinned)

    async def pin(self, key: ConversationKey,
                  pins: tuple[PinnedMessage, ...]) -> tuple[PinnedMessage, ...]:
        """Store pins a client marked (see PinStore.pin)."""
        return await self.pins.pin(key, pins)

    async def _recall(self, key: ConversationKey, query: str, recall: RecallSettings,
                      snapshot: MemorySnapshot, own: bool) -> tuple[Recollection, ...]:
        need = snapshot.need if snapshot.query == query else search_need(query, recall)
        if need is None:
            return ()
        namespaces = snapshot.namespaces if own \
            else replace(snapshot.namespaces, conversation=None, conversation_version=None)
        facts = self.facts.get(key.tenant) \
            if reads_user_memory(key, recall) and recall.facts_k > 0 else None
        if namespaces.conversation is None and namespaces.user is None and facts is None:
            return ()  # nothing to search
        today, query = asked(query)
        vector = await self.embedding.embed_query_one(query)
        turns, known = await asyncio.gather(
            self.recaller.recall(key, query, k=recall.top_k, query_vector=vector,
                                 successors=recall.successors,
                                 successors_of=recall.successors_of, rrf_k=recall.rrf_k,
                                 namespaces=namespaces,
                                 topic_start=snapshot.topic.start if snapshot.topic else None,
                                 topic_boost=recall.topic_boost, ranker=recall.ranker,
                                 chunks=recall.chunks, tool_results=recall.tool_results,
                                 today=today),
            facts.recall(key.tenant, key.user, vector, recall.facts_k, self.vector_index)
            if facts is not None else _nothing())
        # Facts are few, compact and about the user: relevant ones go first.
        return tuple(f for f in known if f.score > 0) \
            + above_floor(turns, recall.relevance_floor, recall.relevance_gate, need,
                          recall.per_relevant)


def reads_user_memory(key: ConversationKey, recall: RecallSettings) -> bool:
    """Whether a request may be given its user's memory from outside the conversation (the
    profile, facts, the user's recall index): an identified user, a tenant scoped to users."""
    return key.identified and recall.across_conversations


def search_need(query: str, recall: RecallSettings) -> Need | None:
    """What `query` asks of recall (gateway/core/recall/need.py), or None when there is no
    search to make: no words, no recall, or a message that needs no memory (whose embedding
    is then never started)."""
    if not query.strip() or recall.top_k <= 0:
        return None
    need = memory_need(query)
    return None if need is Need.NONE else need


async def _nothing() -> list[Recollection]:
    return []
