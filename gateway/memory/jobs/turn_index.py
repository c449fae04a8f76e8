"""The turn index of one conversation: every turn of the active branch, redacted, dated and
embedded, kept in the store so any process can recall it.

Layout (`MemoryKeySpace.conversation`): `turns` maps a stored message id to a JSON entry
`{id, position, role, text, anchor_date, created_at, prev}`; `vectors` maps the same id to its
vector — of the turn in its context, see `turn_entries` — (beside summary chunks'
"chunk:<id>" vectors, which this module never touches); `next` maps a turn id to the id of the
indexed turn after it; `version` is bumped by every write; `watermark` counts the transcript
messages covered.

Invariants, after `sync(key, transcript)` returns:
- `turns` holds exactly the indexable messages of `transcript` (not system/developer, text not
  blank, not a one-shot placeholder), keyed by id; turns of a branch archived by a fork are
  gone, from `vectors` too;
- an entry and its vector are written in one transaction, so a reader never sees one without
  the other; every write bumps `version` in the same transaction;
- only redacted text is stored: `text` and `anchor_date` derive from `redact(message.text)`;
- syncing the same transcript again writes nothing (idempotent).

The watermark makes the common case cheap: when the transcript only grew, the messages past it
are indexed without listing the index. Correctness never rests on it: the fast path is taken
only when the number of entries and the entry of the last indexable message covered by the
watermark prove that the covered prefix is unchanged (ids chain their parents, so one
surviving id vouches for every message before it); otherwise the ids in the index are
compared with the transcript's. (So an index holding one-shot placeholders, indexed before they
were left out, fails the count on the conversation's next run and is synced whole: they go.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence

import redis.asyncio as aioredis

from gateway.core.memory.content import has_content
from gateway.core.text.dates import anchor_dates, with_anchor
from gateway.core.ids import ConversationKey
from gateway.core.messages import StoredMessage
from gateway.core.text.pii import redact
from gateway.memory.search.embedding import EmbeddingService
from gateway.memory.records.keys import ConversationMemoryKeys, MemoryKeySpace
from gateway.memory.records.vector_store import encode_vector
from gateway.memory.records.writes import Direct, Writes
from gateway.store.codec import decode_stored
from gateway.store.encryption.crypto import NO_ENCRYPTION, Encryption
from gateway.store.versions import bump_version


CONTEXT_CHARS = 600


@dataclass(frozen=True, slots=True)
class TurnEntry:
    id: str
    position: int
    role: str
    text: str
    """Redacted text as recall shows it: `[anchor date] text` when the turn has an anchor."""
    anchor_date: str | None
    created_at: float
    previous: str | None
    """The id of the indexable message before it (its context in `embed_text`), if any."""
    embed_text: str
    """What is embedded (not stored): the redacted text without its date prefix, after the
    redacted text of the indexable message before it (see `turn_entries`)."""

    def to_json(self) -> str:
        return json.dumps({"id": self.id, "position": self.position, "role": self.role,
                           "text": self.text, "anchor_date": self.anchor_date,
                           "created_at": self.created_at, "prev": self.previous},
                          ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class SyncResult:
    added: int
    removed: int
    fast_path: bool


def indexable(message: StoredMessage) -> bool:
    """Turns worth recalling: not instructions, not blank (a tool-call-only assistant message
    with no text has nothing to recall; its tool result is indexed on its own), not a one-shot
    placeholder (it says nothing of what it replaced: `core.memory.content`)."""
    return has_content(message.message)


def turn_entries(transcript: Sequence[StoredMessage], start: int = 0,
                 anchor: str | None = None, *, context: bool = True) -> list[TurnEntry]:
    """The entries of the indexable messages of `transcript[start:]`, in order, given the
    date `anchor` carried into position `start` (dates in instructions are not the
    conversation's: they are ignored).

    A turn is embedded in its context: the previous indexable message, then its own text. A
    reply ("Yes, every Sunday at the lake") says little without the question it answers, and
    a question is found through the answer's words too (why: docs/decisions.md, "index:
    context_vectors, stemming, segmentation"). Only the vector changes: the text shown is the
    turn's own."""
    tail = transcript[start:]
    redacted = [redact(m.message.text) if indexable(m) else "" for m in tail]
    anchors = anchor_dates(redacted, initial=anchor)
    previous = _previous(transcript, start)
    before_id, before = (previous.id, redact(previous.message.text)) if previous else (None, None)
    entries = []
    for i, (m, text, a) in enumerate(zip(tail, redacted, anchors)):
        if not indexable(m):
            continue
        entries.append(TurnEntry(id=m.id, position=start + i, role=m.message.role,
                                 text=with_anchor(text, a), anchor_date=a,
                                 created_at=m.created_at, previous=before_id,
                                 embed_text=in_context(before if context else None, text)))
        before_id, before = m.id, text
    return entries


def in_context(previous: str | None, text: str) -> str:
    """The text a turn is embedded as: the end of the previous turn's text (at most
    `CONTEXT_CHARS`, so a long message before it cannot crowd out its own words, which
    embedders cut from the end), a newline, its own."""
    return f"{previous[-CONTEXT_CHARS:]}\n{text}" if previous else text


def _previous(transcript: Sequence[StoredMessage], start: int) -> StoredMessage | None:
    """The last indexable message before `start`, if any."""
    for m in reversed(transcript[:start]):
        if indexable(m):
            return m
    return None


class TurnIndexer:
    """Keeps conversations' turn indexes equal to their active branches. Not safe to run
    twice at once for one conversation: the memory worker holds the conversation's lock."""

    def __init__(self, redis: aioredis.Redis, embedding: EmbeddingService,
                 keys: MemoryKeySpace = MemoryKeySpace(), batch_size: int = 64, *,
                 context: bool = True, encryption: Encryption = NO_ENCRYPTION):
        """`context`: embed each turn after the one before it (see `turn_entries`);
        `encryption`: seals the entries (their vectors stay clear: docs/encryption.md)."""
        self.redis = redis
        self.encryption = encryption
        self.context = context
        self.embedding = embedding
        self.keys = keys
        self.batch_size = batch_size
        self.direct = Direct(redis)

    async def load_transcript(self, key: ConversationKey) -> list[StoredMessage]:
        """The active branch as the store keeps it (applied turns only): its archived oldest
        messages, then the transcript (one transaction: a move between them cannot be seen)."""
        ck = self.keys.store.conversation(key)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.lrange(ck.archive, 0, -1)
            pipe.lrange(ck.transcript, 0, -1)
            archived, live = await pipe.execute()
        return [decode_stored(self.encryption.open(key.tenant, item))
                for item in [*archived, *live]]

    async def sync_from_store(self, key: ConversationKey) -> SyncResult:
        return await self.sync(key, await self.load_transcript(key))

    async def sync(self, key: ConversationKey, transcript: Sequence[StoredMessage], *,
                   writes: Writes | None = None) -> SyncResult:
        """Make the index of `key` equal to `transcript` (its active branch, oldest first).
        `writes`: whose transactions write (the memory job's fence; default: direct)."""
        writes = writes or self.direct
        k = self.keys.conversation(key)
        watermark_raw, count = await self._watermark_and_count(k)
        watermark = int(watermark_raw or 0)
        unchanged, anchor = await self._prefix_unchanged(key.tenant, k, transcript, watermark,
                                                         count)
        if unchanged:
            new = turn_entries(transcript, watermark, anchor, context=self.context)
            await self._add(key.tenant, k, new, writes)
            await self._set_watermark(k, len(transcript), watermark_raw, writes)
            return SyncResult(added=len(new), removed=0, fast_path=True)
        return await self._full_sync(key.tenant, k, transcript, writes)

    async def _watermark_and_count(self, k: ConversationMemoryKeys) -> tuple[str | None, int]:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.get(k.watermark)
            pipe.hlen(k.turns)
            watermark, count = await pipe.execute()
        return watermark, int(count)

    async def _prefix_unchanged(self, tenant: str, k: ConversationMemoryKeys,
                                transcript: Sequence[StoredMessage], watermark: int,
                                count: int) -> tuple[bool, str | None]:
        """Whether the index holds exactly the indexable messages of `transcript[:watermark]`,
        and the date anchor carried past them (that of the last one: instructions and blank
        messages write no dates)."""
        if watermark > len(transcript):
            return False, None
        covered = [m for m in transcript[:watermark] if indexable(m)]
        if len(covered) != count:
            return False, None
        if not covered:
            return True, None
        raw = await self.redis.hget(k.turns, covered[-1].id)
        if raw is None:
            return False, None
        return True, json.loads(self.encryption.open(tenant, raw)).get("anchor_date")

    async def _full_sync(self, tenant: str, k: ConversationMemoryKeys,
                         transcript: Sequence[StoredMessage], writes: Writes) -> SyncResult:
        wanted = turn_entries(transcript, context=self.context)
        wanted_ids = {e.id for e in wanted}
        existing = set(await self.redis.hkeys(k.turns))
        stale = sorted(existing - wanted_ids)
        # Dropping the watermark first: if this sync dies half-way, the next one cannot take
        # the fast path over a half-updated index.
        links = {e.previous: e.id for e in wanted if e.previous is not None}
        async with writes.transaction() as pipe:
            pipe.delete(k.watermark)
            # Successor links are ids only: rewritten whole (a fork changes who follows whom).
            pipe.delete(k.following)
            if links:
                pipe.hset(k.following, mapping=links)
            if stale:
                pipe.hdel(k.turns, *stale)
                pipe.hdel(k.vectors, *stale)
                # Caches that keep turns across additions must drop them (entry_cache.py).
                bump_version(pipe, k.version, removed=True)
            await pipe.execute()
        missing = [e for e in wanted if e.id not in existing]
        await self._add(tenant, k, missing, writes)
        await self._set_watermark(k, len(transcript), None, writes)
        return SyncResult(added=len(missing), removed=len(stale), fast_path=False)

    async def _add(self, tenant: str, k: ConversationMemoryKeys,
                   entries: Sequence[TurnEntry], writes: Writes | None = None) -> None:
        writes = writes or self.direct
        for start in range(0, len(entries), self.batch_size):
            batch = entries[start:start + self.batch_size]
            matrix = await self.embedding.embed([e.embed_text for e in batch])
            links = {e.previous: e.id for e in batch if e.previous is not None}
            async with writes.transaction() as pipe:
                pipe.hset(k.turns, mapping={e.id: self.encryption.seal(tenant, e.to_json())
                                            for e in batch})
                if links:
                    pipe.hset(k.following, mapping=links)
                pipe.hset(k.vectors, mapping={e.id: encode_vector(v, self.embedding.space)
                                              for e, v in zip(batch, matrix)})
                bump_version(pipe, k.version)
                await pipe.execute()

    async def _set_watermark(self, k: ConversationMemoryKeys, value: int,
                             previous: str | None, writes: Writes) -> None:
        if previous is None or int(previous) != value:
            async with writes.transaction() as pipe:
                pipe.set(k.watermark, value)
                await pipe.execute()
