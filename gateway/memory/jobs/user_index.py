"""The user-level recall index: the turns and summary chunks of all of an identified user's
conversations in one namespace (tenant + user), so a new conversation recalls what the user
said in earlier ones.

The memory worker mirrors a conversation into it after indexing and compacting it: no text is
redacted, dated or embedded again — entries and vectors are copied from the conversation's own
index (gateway/memory/jobs/turn_index.py, chunk_store.py), so both say exactly the same.

Layout (`MemoryKeySpace.user`): `recall` maps a qualified id "<conversation>/<item id>" (the
item id being a turn's message id or "chunk:<id>"; conversation ids cannot hold "/", so the
qualification is injective) to a JSON entry `{kind, conversation, id, text, source_ids,
position}` (turns also `prev`, the id of the turn before it in its conversation);
`recall_vectors` maps the same ids to vectors; `recall_version` is bumped by every write;
`recall_members(conversation)` is the set of a conversation's ids, and `recall_synced` records
per conversation the conversation memory version mirrored and when it started.

Invariants:
- only identified users' conversations are mirrored (the anonymous user shares nothing);
- after `sync(key, transcript)`, the conversation's entries are exactly its turn index — less
  its tool results unless `tool_results` (docs/memory.md, "Tool output is not user memory") —
  plus its summary chunks with text (a deleted chunk's text is gone), each with its vector,
  written in transactions that also bump `recall_version`;
- `remove_conversation` leaves nothing of the conversation in the namespace;
- syncing an unchanged conversation reads two values and writes nothing.
"""

from __future__ import annotations

import hashlib
import json
from typing import Sequence

import redis.asyncio as aioredis

from gateway.core.memory.compaction import SummaryChunk, render_chunk
from gateway.core.memory.content import is_tool_result
from gateway.core.ids import ConversationKey
from gateway.core.messages import StoredMessage
from gateway.memory.records.chunk_store import VECTOR_PREFIX as CHUNK_PREFIX
from gateway.memory.records.chunk_store import chunk_from_json
from gateway.memory.records.keys import MemoryKeySpace, UserMemoryKeys
from gateway.memory.records.user_recall import Synced, qualified_id
from gateway.memory.records.writes import Direct, Writes
from gateway.store.codec import json_object
from gateway.store.encryption.crypto import NO_ENCRYPTION, Encryption
from gateway.store.versions import bump_version

PAGE = 512


class UserRecallIndex:
    """Mirrors identified users' conversations into their user namespace. The memory worker
    holds the conversation's lock while syncing; conversations of one user may be synced at
    once by several workers (each writes only its own conversation's ids)."""

    def __init__(self, redis: aioredis.Redis, keys: MemoryKeySpace = MemoryKeySpace(), *,
                 encryption: Encryption = NO_ENCRYPTION):
        """`encryption` opens the conversation's entries and seals the copies."""
        self.redis = redis
        self.keys = keys
        self.encryption = encryption
        self.direct = Direct(redis)

    async def sync(self, key: ConversationKey, transcript: Sequence[StoredMessage], *,
                   tool_results: bool = False, writes: Writes | None = None) -> int:
        """Mirror the conversation's turn index and chunks; returns how many entries changed.
        `tool_results`: its tool results too (the tenant's `memory.recall_tool_results`);
        otherwise they are left out, and removed if an earlier sync mirrored them.
        `writes`: whose transactions write (the memory job's fence; default: direct)."""
        if not key.identified:
            return 0
        writes = writes or self.direct
        ck, uk = self.keys.conversation(key), self.keys.user(key.tenant, key.user)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.get(ck.version)
            pipe.hget(uk.recall_synced, key.conversation)
            version, raw_synced = await pipe.execute()
        if not transcript:  # deleted (or erased) meanwhile: nothing of it stays
            return await self.remove_conversation(key, writes=writes) \
                if raw_synced is not None else 0
        synced = Synced(version, transcript[0].created_at)
        previous = Synced.parse(raw_synced)
        if previous == synced:
            return 0
        members_key = uk.recall_members(key.conversation)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hkeys(ck.turns)
            pipe.lrange(ck.chunks, 0, -1)
            pipe.smembers(members_key)
            turn_ids, raw_chunks, members = await pipe.execute()
        chunks: dict[str, SummaryChunk] = {}
        for raw in raw_chunks:
            chunk = chunk_from_json(self.encryption.open(key.tenant, raw))
            if render_chunk(chunk):
                chunks[CHUNK_PREFIX + chunk.id] = chunk
        if not tool_results:
            # The turn index's entries are the transcript's messages: their roles are known
            # here, without reading the entries.
            tools = {m.id for m in transcript if is_tool_result(m.message)}
            turn_ids = [i for i in turn_ids if i not in tools]
        wanted = {qualified_id(key.conversation, i) for i in [*turn_ids, *chunks]}
        stale = sorted(m for m in members if m not in wanted)
        changed = len(stale)
        if stale:
            await self._delete(uk, key.conversation, stale, writes)
        # Chunks are mutable: written again when their entry changed (or is missing);
        # turns never change: written when new.
        fingerprints = {item: _fingerprint(chunk) for item, chunk in chunks.items()}
        known = previous.chunks if previous is not None else {}
        new = [*(i for i in chunks if qualified_id(key.conversation, i) not in members
                 or known.get(i) != fingerprints[i]),
               *(i for i in turn_ids if qualified_id(key.conversation, i) not in members)]
        for start in range(0, len(new), PAGE):
            changed += await self._copy(key, uk, new[start:start + PAGE], chunks, writes)
        async with writes.transaction() as pipe:
            pipe.hset(uk.recall_synced, key.conversation,
                      Synced(version, synced.started_at, fingerprints).to_json())
            await pipe.execute()
        return changed

    async def _copy(self, key: ConversationKey, uk: UserMemoryKeys, item_ids: list[str],
                    chunks: dict[str, SummaryChunk], writes: Writes) -> int:
        ck = self.keys.conversation(key)
        turn_ids = [i for i in item_ids if i not in chunks]
        raw_turns = await self.redis.hmget(ck.turns, turn_ids) if turn_ids else []
        vectors = await self.redis.hmget(ck.vectors, item_ids)
        texts = dict(zip(turn_ids, raw_turns))
        entries: dict[str, str] = {}
        copied: dict[str, str] = {}
        for item, vector in zip(item_ids, vectors):
            entry = _entry(key.conversation, item, chunks.get(item),
                           self.encryption.open_or_none(key.tenant, texts.get(item)))
            if entry is not None and vector is not None:  # gone since HKEYS: the next sync
                qid = qualified_id(key.conversation, item)
                entries[qid] = self.encryption.seal(key.tenant, entry)
                copied[qid] = vector
        if not entries:
            return 0
        async with writes.transaction() as pipe:
            pipe.hset(uk.recall, mapping=entries)
            pipe.hset(uk.recall_vectors, mapping=copied)
            pipe.sadd(uk.recall_members(key.conversation), *entries)
            bump_version(pipe, uk.recall_version)
            await pipe.execute()
        return len(entries)

    async def _delete(self, uk: UserMemoryKeys, conversation: str, ids: Sequence[str],
                      writes: Writes) -> None:
        async with writes.transaction() as pipe:
            pipe.hdel(uk.recall, *ids)
            pipe.hdel(uk.recall_vectors, *ids)
            pipe.srem(uk.recall_members(conversation), *ids)
            bump_version(pipe, uk.recall_version)
            await pipe.execute()

    async def remove_conversation(self, key: ConversationKey, *,
                                  writes: Writes | None = None) -> int:
        """Forget every entry of the conversation (it was deleted); returns how many."""
        uk = self.keys.user(key.tenant, key.user)
        members = sorted(await self.redis.smembers(uk.recall_members(key.conversation)))
        async with (writes or self.direct).transaction() as pipe:
            if members:
                pipe.hdel(uk.recall, *members)
                pipe.hdel(uk.recall_vectors, *members)
            pipe.delete(uk.recall_members(key.conversation))
            pipe.hdel(uk.recall_synced, key.conversation)
            bump_version(pipe, uk.recall_version)
            await pipe.execute()
        return len(members)

    async def remove_chunk(self, key: ConversationKey, chunk_id: str) -> None:
        """Forget one summary chunk (deleted by the user) without waiting for the next sync."""
        await self._delete(self.keys.user(key.tenant, key.user), key.conversation,
                           [qualified_id(key.conversation, CHUNK_PREFIX + chunk_id)],
                           self.direct)


def _fingerprint(chunk: SummaryChunk) -> str:
    """What a chunk's mirrored entry is made of (its vector is of its text), digested."""
    content = json.dumps([render_chunk(chunk), list(chunk.source_ids), chunk.first_position],
                         ensure_ascii=False)
    return hashlib.sha1(content.encode()).hexdigest()[:16]


def _entry(conversation: str, item: str, chunk: SummaryChunk | None,
           raw_turn: str | None) -> str | None:
    if chunk is not None:
        data = {"kind": "chunk", "text": render_chunk(chunk), "source_ids": list(chunk.source_ids),
                "position": chunk.first_position}
    else:
        turn = json_object(raw_turn)
        if turn is None or not isinstance(turn.get("text"), str):
            return None
        data = {"kind": "turn", "text": turn["text"], "source_ids": [item],
                "position": int(turn.get("position", -1)), "prev": turn.get("prev"),
                "role": turn.get("role")}
    return json.dumps({"conversation": conversation, "id": item, **data},
                      ensure_ascii=False, separators=(",", ":"))
