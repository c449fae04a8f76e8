"""Request-path recall of one conversation's older turns and summary chunks for a question.

One recall: embed the question once, search the conversation namespace densely (FAISS) and
lexically (BM25) — the lexical search runs while the question is being embedded — fuse the two
rankings (`gateway.core.fusion`: reciprocal-rank fusion, k=60, with a mild recency weight),
drop what the request already shows, and return the best k as `Recollection`s.

Invariants: only the conversation's own namespace is searched; a turn is returned with the
text its entry holds (redacted, date-anchored); an item whose id is in `exclude_ids` — or a
chunk all of whose source turns are — is never returned; an empty namespace returns [] without
embedding anything; every error propagates (the pipeline fails open around recall).
"""

from __future__ import annotations

import asyncio

import numpy as np
import redis.asyncio as aioredis

from gateway.core.compaction import render_chunk
from gateway.core.fusion import RECENCY_WEIGHT, RRF_K, fuse
from gateway.core.ids import ConversationKey
from gateway.core.recall import Recollection
from gateway.memory.chunk_store import chunk_from_json
from gateway.memory.embedding import EmbeddingService
from gateway.memory.keys import MemoryKeySpace
from gateway.memory.lexical_index import CHUNK_PREFIX, chunk_id
from gateway.memory.ports import LexicalIndex, Namespace, VectorIndex
from gateway.store.codec import json_object


class Recaller:
    def __init__(self, embedding: EmbeddingService, vector_index: VectorIndex,
                 lexical_index: LexicalIndex, redis: aioredis.Redis,
                 keys: MemoryKeySpace = MemoryKeySpace(), *, rrf_k: int = RRF_K,
                 recency_weight: float = RECENCY_WEIGHT, depth: int | None = None):
        """`depth`: how many hits each search contributes to the fusion (default: the k of
        the call, at least 20)."""
        self.embedding = embedding
        self.vector_index = vector_index
        self.lexical_index = lexical_index
        self.redis = redis
        self.keys = keys
        self.rrf_k = rrf_k
        self.recency_weight = recency_weight
        self.depth = depth

    async def recall(self, key: ConversationKey, query: str, *, k: int = 50,
                     exclude_ids: frozenset[str] = frozenset(),
                     query_vector: np.ndarray | None = None) -> list[Recollection]:
        """The k items of the conversation most relevant to `query`, best first.
        `query_vector`: the query's embedding, when the caller already has it."""
        ck = self.keys.conversation(key)
        if k <= 0 or not await self.redis.exists(ck.turns, ck.chunks):
            return []
        namespace = Namespace.of_conversation(key)
        # Excluded items would be dropped after fusion: search deeper so k remain.
        depth = max(self.depth or max(k, 20), k) + len(exclude_ids)

        async def dense() -> list[tuple[str, float]]:
            vector = query_vector if query_vector is not None \
                else await self.embedding.embed_one(query)
            return await self.vector_index.search(namespace, vector, depth)

        dense_hits, lexical_hits = await asyncio.gather(
            dense(), self.lexical_index.search(namespace, query, depth))
        candidates = list(dict.fromkeys([i for i, _ in dense_hits] + [i for i, _ in lexical_hits]))
        items = await self._items(ck.turns, ck.chunks, candidates)
        items = {i: item for i, item in items.items() if not _excluded(item, exclude_ids)}
        positions = {i: item.position for i, item in items.items()}
        fused = fuse([[i for i, _ in dense_hits if i in items],
                      [i for i, _ in lexical_hits if i in items]],
                     positions, k=self.rrf_k, recency_weight=self.recency_weight)
        return [_scored(items[i], score) for i, score in fused[:k]]

    async def _items(self, turns_key: str, chunks_key: str,
                     candidates: list[str]) -> dict[str, Recollection]:
        """The stored items behind candidate ids (score 0). Ids whose entry is gone (deleted
        since the index was built) or unreadable are left out."""
        turn_ids = [i for i in candidates if not i.startswith(CHUNK_PREFIX)]
        wants_chunks = len(turn_ids) < len(candidates)
        if not candidates:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            if turn_ids:
                pipe.hmget(turns_key, turn_ids)
            if wants_chunks:
                pipe.lrange(chunks_key, 0, -1)
            results = list(await pipe.execute())
        raw_turns = results.pop(0) if turn_ids else []
        raw_chunks = results.pop(0) if wants_chunks else []
        items: dict[str, Recollection] = {}
        for item_id, raw in zip(turn_ids, raw_turns):
            entry = json_object(raw)
            if entry is not None and isinstance(entry.get("text"), str):
                items[item_id] = Recollection("turn", item_id, entry["text"], (item_id,),
                                              int(entry.get("position", -1)), 0.0)
        if wants_chunks:
            wanted = set(candidates)
            for raw in raw_chunks:
                try:
                    chunk = chunk_from_json(raw)
                except ValueError:
                    continue  # unreadable: left out, like a vanished turn
                cid = chunk_id(chunk.id)
                text = render_chunk(chunk)  # with its date span; "" once deleted by the user
                if cid in wanted and text:
                    items[cid] = Recollection("chunk", cid, text, chunk.source_ids,
                                              chunk.first_position, 0.0)
        return items


def _excluded(item: Recollection, exclude_ids: frozenset[str]) -> bool:
    if item.id in exclude_ids:
        return True
    # A chunk that only summarises turns the request shows verbatim adds nothing.
    return item.kind == "chunk" and bool(item.source_ids) \
        and all(s in exclude_ids for s in item.source_ids)


def _scored(item: Recollection, score: float) -> Recollection:
    return Recollection(item.kind, item.id, item.text, item.source_ids, item.position, score)
