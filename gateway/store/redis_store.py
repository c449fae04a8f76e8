"""The conversation store on Redis (or Valkey): durable enqueue, read-your-writes load.

Invariants:
- `record` is one atomic step (a Lua script): the turn gets the conversation's next seq, is
  kept in the pending hash and is added to the record stream — all or nothing. Once it returns,
  the turn survives a crash of this process; the recorder applies it later, in seq order.
  Retrying a record whose reply was lost is safe: the conversation's last enqueued payload is
  remembered (by its sha1) and the same payload again is not enqueued twice.
- `load` returns the active branch *as it will be* once every pending turn is applied: the
  stored transcript plus the pending turns applied in seq order with the same pure
  `apply_turn` the recorder uses (each pending turn decoded and applied once while it waits:
  `PendingCache`). The reads are one script (atomic), so a recorder applying a
  turn concurrently can never make it appear twice or not at all. The decoded transcript is
  cached in process (`TranscriptCache`); the script sends nothing when the cached one is
  still current, only the new elements when it was appended to, and all of it otherwise
  (hash-chained messages: an element identifies everything before it), so a cached
  transcript is never stale — also when another replica's recorder changed it.
- The store keeps only what a record says and never mutates its inputs (all frozen values).
- Erasure: once a user's memory is erased (`mark_erased`, a tombstone holding the store's time
  of the erase), turns created at or before that time are never enqueued again (`record`), never
  shown (`load`), applied (recorder) or learned from (memory worker) — see `erased_before`.
  A deleted conversation has a tombstone of its own (`delete`), read with the user's: the later
  of the two counts (`LATER_TOMBSTONE_LUA`).

The client must be created with `decode_responses=True` (see `gateway.store.connect`).
"""

from __future__ import annotations

import redis.asyncio as aioredis

from gateway.core.ids import ConversationKey
from gateway.core.messages import StoredMessage
from gateway.core.transcript import TurnRecord
from gateway.store.archive import TranscriptArchive
from gateway.store.cluster import primary_targets
from gateway.store.codec import (ArchivedBranch, decode_branch, decode_record,
                                 encode_record)
from gateway.store.encryption.crypto import NO_ENCRYPTION, Encryption
from gateway.store.keys import KeySpace
from gateway.store.pending_cache import PendingCache
from gateway.store.transcript_cache import TRANSCRIPT_LUA, TranscriptCache


LATER_TOMBSTONE_LUA = """
local function later_tombstone(user_key, conversation_key)
  local a, b = redis.call('GET', user_key), redis.call('GET', conversation_key)
  if a and b then
    if tonumber(b) > tonumber(a) then return b end
    return a
  end
  return a or b
end
"""
"""A Lua function: the later of the user's erase tombstone and the conversation's (false if
neither is set)."""

# KEYS: seq counter, pending hash, record stream, the user's erase tombstone, last enqueued,
# the conversation's tombstone. ARGV: tenant, user, conversation, payload, created_at (ms),
# the payload's digest ("": its sha1 here; an encrypted payload differs on every retry, so the
# caller passes the tenant's keyed digest of the plaintext instead — see
# gateway/store/encryption/crypto.py).
# Returns the stream entry id (false: the turn predates an erase of its user or a delete of its
# conversation and is dropped —
# e.g. held in a record buffer while the store was down). Lua runs atomically, so seq order
# equals stream order per conversation, and a seq is pending exactly while it is neither
# applied nor dead-lettered. Idempotent for a retry: a payload equal to the one enqueued last
# for the conversation (same messages, request id and creation time — a retried enqueue whose
# reply was lost) returns that turn's entry id instead of enqueueing it again.
_RECORD_LUA = LATER_TOMBSTONE_LUA + """
local erased = later_tombstone(KEYS[4], KEYS[6])
if erased and tonumber(ARGV[5]) <= tonumber(erased) then return false end
local digest = ARGV[6]
if digest == '' then digest = redis.sha1hex(ARGV[4]) end
local last = redis.call('GET', KEYS[5])
if last and string.sub(last, 1, 40) == digest then return string.sub(last, 42) end
local seq = redis.call('INCR', KEYS[1])
redis.call('PERSIST', KEYS[1])  -- a counter an older release's delete left expiring lives on
redis.call('HSET', KEYS[2], seq, ARGV[4])
local id = redis.call('XADD', KEYS[3], '*', 'tenant', ARGV[1], 'user', ARGV[2],
                      'conversation', ARGV[3], 'seq', seq, 'payload', ARGV[4])
redis.call('SET', KEYS[5], digest .. ' ' .. id)
return id
"""

# KEYS: the conversation's tombstone, seq counter, applied seq, transcript, branches, pending,
# meta, last enqueued, archive. ARGV: the tombstone's time to live (ms).
# Writes the tombstone (the store's time) and deletes every other key: a turn created before
# it — a job a recorder read before the delete, one held in a record buffer — is dropped
# wherever it turns up (`erased_before`), so nothing keeps the conversation's id to mark it.
_DELETE_LUA = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local before = tonumber(redis.call('GET', KEYS[1]) or '0')
if ms <= before then ms = before + 1 end  -- every delete changes it (memory jobs' fences)
redis.call('SET', KEYS[1], string.format('%d', ms), 'PX', ARGV[1])
return redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8],
                  KEYS[9])
"""

# KEYS: the user's erase tombstone. ARGV: its time to live (ms). Returns the erase time (ms).
# The store's own clock, so every replica compares against one time, as stream ids do; always
# later than the tombstone it replaces, so a memory job's fence sees every erase.
_MARK_ERASED_LUA = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local before = tonumber(redis.call('GET', KEYS[1]) or '0')
if ms <= before then ms = before + 1 end  -- every erase changes it (memory jobs' fences)
redis.call('SET', KEYS[1], string.format('%d', ms), 'PX', ARGV[1])
return ms
"""

# KEYS: transcript, its archive, pending hash, applied seq, the user's erase tombstone, the
# conversation's tombstone. ARGV: as TRANSCRIPT_LUA (what the caller has cached). Returns
# {how, elements, offset (see TRANSCRIPT_LUA), the pending hash (flat), applied ("" if none),
# the later tombstone ("" if none)}: one round trip, atomic like the MULTI it replaces.
_LOAD_LUA = TRANSCRIPT_LUA + LATER_TOMBSTONE_LUA + """
return {how, elements, offset, redis.call('HGETALL', KEYS[3]),
        redis.call('GET', KEYS[4]) or '', later_tombstone(KEYS[5], KEYS[6]) or ''}
"""

ERASED_TTL_MS = 30 * 86_400_000
"""How long an erase or delete tombstone is kept: far longer than any turn can wait in a record
buffer or the record stream (an erase or delete also deletes the queued jobs it concerns)."""


def erased_before(tombstone: str | None, created_at: float) -> bool:
    """True if a turn created at `created_at` (seconds) predates the user's erase."""
    return tombstone is not None and created_at * 1000 <= int(tombstone)


def entry_ms(entry_id: str) -> int:
    """The store time (ms) a stream entry was added at."""
    return int(entry_id.partition("-")[0])


def require_decoded(client: aioredis.Redis) -> None:
    """Fail early, with a clear message, on a client that returns bytes."""
    if not client.get_connection_kwargs().get("decode_responses"):
        raise ValueError("the store needs a redis client made with decode_responses=True "
                         "(use gateway.store.connect)")


class RedisStore:
    """`ports.ConversationStore` on `redis.asyncio`."""

    def __init__(self, client: aioredis.Redis, keys: KeySpace | None = None, *,
                 cache: TranscriptCache | None = None,
                 encryption: Encryption = NO_ENCRYPTION):
        """`encryption`: seals what is stored and opens what is read (per tenant)."""
        require_decoded(client)
        self._redis = client
        self.keys = keys or KeySpace()
        self.encryption = encryption
        self.cache = cache if cache is not None else TranscriptCache(encryption=encryption)
        self.pending = PendingCache()
        """Pending turns decoded and applied by earlier loads (only new ones cost a load)."""
        self.archive = TranscriptArchive(client, self.keys, encryption=encryption)
        self._load_script = client.register_script(_LOAD_LUA)
        self._record_script = client.register_script(_RECORD_LUA)
        self._delete_script = client.register_script(_DELETE_LUA)
        self._mark_erased_script = client.register_script(_MARK_ERASED_LUA)

    async def record(self, key: ConversationKey, record: TurnRecord) -> str:
        ck = self.keys.conversation(key)
        payload = encode_record(record)
        crypto = self.encryption
        # The user's shard's stream (the only one without a cluster): in the slot of `ck`.
        stream = self.keys.records_at(self.keys.shard_of(key.tenant, key.user))
        entry_id = await self._record_script(
            keys=[ck.seq, ck.pending, stream, self.keys.erased(key.tenant, key.user),
                  ck.last_enqueued, ck.deleted],
            args=[key.tenant, key.user, key.conversation, crypto.seal(key.tenant, payload),
                  int(record.created_at * 1000), crypto.digest(key.tenant, payload)])
        return "" if entry_id is None else str(entry_id)

    async def load(self, key: ConversationKey) -> tuple[StoredMessage, ...]:
        messages, flat_pending, applied, erased, _offset = await self._read(key)
        pending = dict(zip(flat_pending[::2], flat_pending[1::2]))
        erased = erased or None
        return self.pending.applied(
            key, messages, pending, int(applied or 0), erased,
            lambda text: decode_record(self.encryption.open(key.tenant, text)),
            lambda created_at: erased_before(erased, created_at))

    async def applied(self, key: ConversationKey) -> tuple[StoredMessage, ...]:
        """The whole active branch as the recorder has applied it (no pending turn): its
        archived messages, then the transcript, read through the caches (only what is new is
        decoded) — what the memory worker derives memory from, so every position it keeps
        counts from the conversation's start, whatever has been archived."""
        live, _pending, _applied, _erased, offset = await self._read(key)
        if not offset:
            return live
        return await self.archive.branch(key, live, offset)

    async def history(self, key: ConversationKey) -> tuple[StoredMessage, ...]:
        """The whole active branch as `load` shows it (pending turns included), its archived
        messages first: what the user sees of the conversation (the memory API)."""
        live = await self.load(key)
        return await self.archive.before(key, live) + live

    async def _read(self, key: ConversationKey) -> tuple[tuple[StoredMessage, ...], list[str],
                                                         str, str, int]:
        """(the applied transcript, the pending hash flat, applied seq, erase tombstone, how
        many messages are archived before the transcript)."""
        ck = self.keys.conversation(key)
        cached = self.cache.get(key)
        how, elements, offset, flat_pending, applied, erased = await self._load_script(
            keys=[ck.transcript, ck.archive, ck.pending, ck.applied,
                  self.keys.erased(key.tenant, key.user), ck.deleted],
            args=self.cache.args(cached))
        return (self.cache.resolve(key, cached, how, elements, offset), flat_pending, applied,
                erased, int(offset))

    async def delete(self, key: ConversationKey) -> None:
        """Forget the conversation: transcript, archive, branches, pending turns, meta and seq
        counters; its tombstone (`ConversationKeys.deleted`) keeps turns created before the
        delete from coming back, and the id may be used again for a new conversation."""
        ck = self.keys.conversation(key)
        await self._delete_script(keys=[ck.deleted, ck.seq, ck.applied, ck.transcript,
                                        ck.branches, ck.pending, ck.meta, ck.last_enqueued,
                                        ck.archive],
                                  args=[ERASED_TTL_MS])
        self.cache.forget(key)
        self.archive.cache.forget(key)

    @property
    def client(self) -> aioredis.Redis:
        """The store's connection, for modules keeping their own keys beside the store's."""
        return self._redis

    async def mark_erased(self, tenant: str, user: str) -> int:
        """Write the user's erase tombstone, drop the user's cached transcripts; returns the
        erase time (ms, the store's clock)."""
        erased = int(await self._mark_erased_script(keys=[self.keys.erased(tenant, user)],
                                                    args=[ERASED_TTL_MS]))
        self.forget_cached(tenant, user)
        return erased

    def forget_cached(self, tenant: str, user: str) -> None:
        """Drop the user's transcripts and archives this process holds decoded."""
        self.cache.forget_user(tenant, user)
        self.archive.cache.forget_user(tenant, user)

    async def ping(self) -> None:
        """Every primary answers (a cluster missing one cannot serve that node's users)."""
        for target in await primary_targets(self._redis):
            await self._redis.execute_command("PING", **target)

    async def branches(self, key: ConversationKey) -> tuple[ArchivedBranch, ...]:
        """Archived branches of the conversation, oldest first."""
        raw = await self._redis.lrange(self.keys.conversation(key).branches, 0, -1)
        return tuple(decode_branch(self.encryption.open(key.tenant, text)) for text in raw)

    async def applied_seq(self, key: ConversationKey) -> int:
        """Seq of the last turn applied or dead-lettered (0: none yet)."""
        return int(await self._redis.get(self.keys.conversation(key).applied) or 0)

    async def pending_count(self, key: ConversationKey) -> int:
        """Turns enqueued and not yet applied."""
        return int(await self._redis.hlen(self.keys.conversation(key).pending))

    async def meta(self, key: ConversationKey) -> dict[str, str]:
        return dict(await self._redis.hgetall(self.keys.conversation(key).meta))

    async def dead_letter_count(self) -> int:
        """Dead-lettered record jobs, over every shard."""
        total = 0
        for shard in self.keys.shard_ids():
            total += int(await self._redis.get(self.keys.dead_count_at(shard)) or 0)
        return total
