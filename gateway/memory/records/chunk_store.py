"""A conversation's summary chunks in Redis, with their vectors.

Layout (gateway/memory/records/keys.py): `chunks` is a list of JSON chunks, oldest first; each
chunk's
vector sits in the conversation's `vectors` hash under "chunk:<id>" (base64 float32, as
gateway/memory/records/vector_store.py encodes it); `version` is bumped by every change.

Every write is one MULTI transaction — list, vectors and version change together, so a reader
never sees a chunk without its vector or a stale version — and checks what it read with WATCH:
a concurrent writer makes `append` / `replace` answer False instead of overwriting its work.
A chunk without text (a deleted one, or a span with nothing to say) has no vector.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

import numpy as np
import redis.asyncio as aioredis
from redis.exceptions import WatchError

from gateway.core.memory.compaction import SummaryChunk
from gateway.core.ids import ConversationKey
from gateway.memory.records.keys import ConversationMemoryKeys, MemoryKeySpace
from gateway.memory.records.vector_store import encode_vector
from gateway.memory.records.writes import Direct, Writes
from gateway.store.encryption.crypto import NO_ENCRYPTION, Encryption
from gateway.store.versions import bump_version

VECTOR_PREFIX = "chunk:"


def vector_id(chunk_id: str) -> str:
    return VECTOR_PREFIX + chunk_id


def chunk_to_json(chunk: SummaryChunk) -> str:
    return json.dumps({
        "id": chunk.id, "text": chunk.text, "source_ids": list(chunk.source_ids),
        "first_position": chunk.first_position, "last_position": chunk.last_position,
        "start_date": chunk.start_date, "end_date": chunk.end_date, "tokens": chunk.tokens,
        "created_at": chunk.created_at, "method": chunk.method,
    }, ensure_ascii=False, separators=(",", ":"))


def chunk_from_json(text: str | bytes) -> SummaryChunk:
    data: dict[str, Any] = json.loads(text)
    return SummaryChunk(
        id=data["id"], text=data["text"], source_ids=tuple(data["source_ids"]),
        first_position=int(data["first_position"]), last_position=int(data["last_position"]),
        start_date=data.get("start_date"), end_date=data.get("end_date"),
        tokens=int(data.get("tokens", 0)), created_at=float(data.get("created_at", 0.0)),
        method=data.get("method", "extractive"))


class ChunkStore:
    def __init__(self, redis: aioredis.Redis, keys: MemoryKeySpace | None = None, *,
                 encryption: Encryption = NO_ENCRYPTION, space: str | None = None) -> None:
        """`encryption` seals each chunk's JSON (its vector stays clear: docs/encryption.md).
        `space`: the
        vector space of the vectors written (vector_store.space_of); None for a store that
        never writes one (deleting a chunk writes no vector)."""
        self.redis = redis
        self.keys = keys or MemoryKeySpace()
        self.encryption = encryption
        self.space = space
        self.direct = Direct(redis)

    def _encode(self, vector: np.ndarray) -> str:
        if self.space is None:
            raise ValueError("this ChunkStore has no vector space: it cannot store vectors")
        return encode_vector(vector, self.space)

    def _keys(self, key: ConversationKey) -> ConversationMemoryKeys:
        return self.keys.conversation(key)

    async def list(self, key: ConversationKey) -> tuple[SummaryChunk, ...]:
        """All chunks, oldest first (deleted ones included, as blank tombstones)."""
        return self.parse(await self.redis.lrange(self.key(key), 0, -1), key)

    def key(self, key: ConversationKey) -> str:
        """The list `parse` reads whole (for callers batching their reads)."""
        return self._keys(key).chunks

    def parse(self, items: Sequence[str], key: ConversationKey) -> tuple[SummaryChunk, ...]:
        return tuple(self._read(key, item) for item in items)

    def _read(self, key: ConversationKey, raw: str) -> SummaryChunk:
        return chunk_from_json(self.encryption.open(key.tenant, raw))

    def _write(self, key: ConversationKey, chunk: SummaryChunk) -> str:
        return self.encryption.seal(key.tenant, chunk_to_json(chunk))

    async def get(self, key: ConversationKey, chunk_id: str) -> SummaryChunk | None:
        return next((c for c in await self.list(key) if c.id == chunk_id), None)

    async def vectors(self, key: ConversationKey,
                      chunk_ids: Sequence[str]) -> tuple[str | None, ...]:
        """The stored (encoded) vectors of `chunk_ids`, None where a chunk has none."""
        if not chunk_ids:
            return ()
        return tuple(await self.redis.hmget(self._keys(key).vectors,
                                            [vector_id(i) for i in chunk_ids]))

    async def append(self, key: ConversationKey, chunk: SummaryChunk,
                     vector: np.ndarray | None, *, writes: Writes | None = None) -> bool:
        """Add `chunk` after the last one, with its vector. False (nothing written) when the
        stored chunks already reach its span — it was made before, or by someone else.
        `writes`: whose transaction writes it (a memory job's fence; default: direct)."""
        keys = self._keys(key)
        async with (writes or self.direct).transaction(keys.chunks) as pipe:
            try:
                last = await pipe.lindex(keys.chunks, -1)
                if last is not None and \
                        self._read(key, last).last_position >= chunk.first_position:
                    return False
                pipe.multi()
                pipe.rpush(keys.chunks, self._write(key, chunk))
                if vector is not None:
                    pipe.hset(keys.vectors, vector_id(chunk.id), self._encode(vector))
                bump_version(pipe, keys.version)
                await pipe.execute()
            except WatchError:
                return False
        return True

    async def replace(self, key: ConversationKey, expected: Sequence[SummaryChunk],
                      chunks: Sequence[SummaryChunk],
                      vectors: Mapping[str, np.ndarray] | None = None, *,
                      writes: Writes | None = None) -> bool:
        """Swap the stored list `expected` (as read before) for `chunks`: vectors of chunks
        no longer present (or now blank) are deleted, `vectors` (chunk id -> vector) are
        stored. False, with nothing written, when the stored list is no longer `expected`.
        `writes`: as `append`."""
        keys = self._keys(key)
        vectors = vectors or {}
        new = {c.id: c for c in chunks}
        gone = [vector_id(c.id) for c in expected if c.id not in new or new[c.id].deleted]
        async with (writes or self.direct).transaction(keys.chunks) as pipe:
            try:
                stored = await pipe.lrange(keys.chunks, 0, -1)
                if [self._read(key, s).id for s in stored] != [c.id for c in expected]:
                    return False
                pipe.multi()
                pipe.delete(keys.chunks)
                if chunks:
                    pipe.rpush(keys.chunks, *(self._write(key, c) for c in chunks))
                if gone:
                    pipe.hdel(keys.vectors, *gone)
                if vectors:
                    pipe.hset(keys.vectors, mapping={vector_id(i): self._encode(v)
                                                     for i, v in vectors.items()})
                bump_version(pipe, keys.version)
                await pipe.execute()
            except WatchError:
                return False
        return True

    async def delete(self, key: ConversationKey, chunk_id: str) -> bool:
        """Forget one chunk's text (the user-control API): it stays as a blank tombstone with
        its span, so the compactor does not summarise those turns again; its vector is
        deleted. False when there is no such chunk (or it changed meanwhile)."""
        for _ in range(3):
            current = await self.list(key)
            if not any(c.id == chunk_id for c in current):
                return False
            blanked = tuple(_blank(c) if c.id == chunk_id else c for c in current)
            if await self.replace(key, current, blanked):
                return True
        return False


def _blank(chunk: SummaryChunk) -> SummaryChunk:
    return SummaryChunk(id=chunk.id, text="", source_ids=chunk.source_ids,
                        first_position=chunk.first_position, last_position=chunk.last_position,
                        start_date=None, end_date=None, tokens=0, created_at=chunk.created_at,
                        method=chunk.method)
