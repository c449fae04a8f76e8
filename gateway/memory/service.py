"""Memory on the request path: what the memory layers offer for one request.

Only reads: the user's switches, the conversation's summary chunks, the user's profile, and a
search (one query embedding, shared) over the conversation's older turns and chunks and over
the user's long-term facts. Everything is written by the memory worker, off the request path.
The caller fails open around `context_for`: memory that cannot be read leaves the request as
the transcript alone would make it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Mapping

from gateway.core.compaction import render_chunk
from gateway.core.fusion import RRF_K
from gateway.core.ids import ConversationKey
from gateway.core.memory import MemoryContext
from gateway.core.profile import render_profile
from gateway.core.recall import Recollection
from gateway.memory.chunk_store import ChunkStore
from gateway.memory.embedding import EmbeddingService
from gateway.memory.facts_store import FactStore
from gateway.memory.ports import VectorIndex
from gateway.memory.profile_store import ProfileStore
from gateway.memory.recaller import Recaller
from gateway.memory.settings_store import SettingsStore


@dataclass(frozen=True, slots=True)
class RecallSettings:
    top_k: int = 50
    """Older turns and chunks offered to the rewrite (it packs what its budget allows)."""
    facts_k: int = 0
    """The user's facts offered with each request, most relevant first (0: none). A user has
    few facts and each costs ~10 tokens; question-to-statement similarity is weak with small
    embedders ("Where do I live?" vs "user location: Lisbon" scores 0.16 with USE), so a
    threshold would hide exactly the facts long-term memory is for. Off by default: on the
    LoCoMo dev split 6 facts per request cost ~3 % of a 2,000-token budget and kept no more
    evidence or answers (0.898 vs 0.900 evidence recall) — the turns they were learned from
    are recalled themselves, across the user's conversations too."""
    fact_min_score: float = 0.0
    """Facts scoring at or below this (similarity × decayed importance) are left out."""
    successors: bool = True
    """A recalled turn brings the turn after it."""
    summaries: bool = True
    """Read the conversation's summary chunks for the summary block (false when the tenant's
    `summary_share` is 0: the block could never be shown)."""
    rrf_k: int = RRF_K
    """The k of the reciprocal-rank fusion."""


class MemoryService:
    def __init__(self, *, embedding: EmbeddingService, recaller: Recaller,
                 vector_index: VectorIndex, chunks: ChunkStore, profiles: ProfileStore,
                 settings: SettingsStore, facts: Mapping[str, FactStore]):
        self.embedding = embedding
        self.recaller = recaller
        self.vector_index = vector_index
        self.chunks = chunks
        self.profiles = profiles
        self.settings = settings
        self.facts = facts
        """One fact store per tenant: caps and decay are the tenant's policy."""

    async def context_for(self, key: ConversationKey, query: str,
                          recall: RecallSettings) -> MemoryContext:
        settings = await self.settings.get(key.tenant, key.user)
        if not settings.memory:
            return MemoryContext()
        chunks, profile, recalled = await asyncio.gather(
            # The summary block only when the tenant gives it a share: else not read at all.
            self.chunks.list(key) if recall.summaries else _nothing(),
            self.profiles.get(key.tenant, key.user) if key.identified else _nothing(),
            self._recall(key, query, recall))
        last = chunks[-1].source_ids[-1] if chunks and chunks[-1].source_ids else None
        return MemoryContext(summary_chunks=tuple(t for t in map(render_chunk, chunks) if t),
                             profile=render_profile(profile) if profile else None,
                             recalled=recalled, summarized_through=last)

    async def _recall(self, key: ConversationKey, query: str,
                      recall: RecallSettings) -> tuple[Recollection, ...]:
        if not query.strip() or recall.top_k <= 0:
            return ()
        vector = await self.embedding.embed_one(query)
        facts = self.facts.get(key.tenant) if key.identified else None
        turns, known = await asyncio.gather(
            self.recaller.recall(key, query, k=recall.top_k, query_vector=vector,
                                 successors=recall.successors, rrf_k=recall.rrf_k),
            facts.recall(key.tenant, key.user, vector, recall.facts_k, self.vector_index)
            if facts is not None else _nothing())
        # Facts are few, compact and about the user: relevant ones go first.
        return tuple(f for f in known if f.score > recall.fact_min_score) + tuple(turns)


async def _nothing() -> list[Recollection]:
    return []
