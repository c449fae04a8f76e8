"""The memory worker: turns applied transcripts into memory, off the request path.

The recorder marks a conversation dirty (sorted set `KeySpace.memory_dirty_at(shard)`, one
per shard of a cluster, one without; score = time of the change) in the same transaction that
applies a turn. This worker takes dirty conversations
oldest first and runs the memory processors on the applied transcript (index turns, compact
into summary chunks, extract facts and profile). Invariants:
- durable: a conversation leaves the dirty set only after every processor succeeded, and only
  if it was not marked again meanwhile (compare-and-delete on the score); a crashed worker's
  conversations stay dirty, and its lock expires;
- coalesced: many turns recorded while a conversation waits are processed in one run;
- exclusive: one worker (of any process or replica) processes a conversation at a time
  (SET NX PX lock), since processors read-modify-write per-conversation state;
- bounded: a conversation failing `max_attempts` times in a row is moved to a dead-letter
  hash with its error, counted and logged — never retried forever, never dropped silently.
Processors must be idempotent: they may see the same transcript twice.

Long conversations: the transcript a processor sees is the whole active branch, archived
messages first (`RedisStore.applied`), so every position memory keeps (watermark, processed
count, chunk spans, turn positions) counts from the conversation's start whatever has been
archived. After a successful run, `archive` moves the oldest processed messages beyond the
tenant's cap out of the live transcript (gateway/store/archive.py) — never one not processed.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Protocol, Sequence

import redis.asyncio as aioredis

from gateway.core.ids import ConversationKey
from gateway.core.messages import StoredMessage
from gateway.ops.job_metrics import JobMetrics
from gateway.memory.records.keys import MemoryKeySpace
from gateway.memory.records.settings_store import SettingsStore, UserSettings
from gateway.store.codec import CodecError, decode_key, decode_stored
from gateway.store.outage import OutageLog
from gateway.store.redis_store import erased_before
from gateway.ops.tracing import JOB_SPANS, Tracing, job_span

log = logging.getLogger("gateway.memory")

# Remove the member only if its score is still the one we processed.
_DONE_LUA = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) == tonumber(ARGV[2]) then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
"""
_UNLOCK_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


@dataclass(frozen=True, slots=True)
class MemoryUpdate:
    key: ConversationKey
    transcript: tuple[StoredMessage, ...]
    """The applied active branch, oldest first."""
    new: tuple[StoredMessage, ...]
    """Its messages this worker has not processed before (all of them after a fork)."""
    settings: UserSettings


class MemoryProcessor(Protocol):
    name: str

    async def process(self, update: MemoryUpdate) -> None: ...


@dataclass
class _Failures:
    attempts: dict[str, int] = field(default_factory=dict)


class MemoryWorker:
    def __init__(self, redis: aioredis.Redis, processors: Sequence[MemoryProcessor], *,
                 keys: MemoryKeySpace | None = None, settings: SettingsStore | None = None,
                 poll_seconds: float = 0.2, lock_ms: int = 60_000, max_attempts: int = 5,
                 backoff_seconds: float = 0.5, batch: int = 8,
                 transcripts: Callable[[ConversationKey],
                                       Awaitable[tuple[StoredMessage, ...]]] | None = None,
                 clock: Callable[[], float] = time.time, tracing: Tracing | None = None,
                 jobs: JobMetrics | None = None,
                 archive: Callable[[ConversationKey, tuple[StoredMessage, ...]],
                                   Awaitable[int]] | None = None):
        """`transcripts`: reads a conversation's applied transcript (RedisStore.applied: cached
        in process, only new messages decoded); default: read and decode it whole.
        `tracing`: a span per conversation processed and per processor (None: off). `jobs`:
        where retries are counted for /metrics. `archive`: called with the branch just
        processed, moves what is beyond the tenant's cap out of the live transcript (None:
        nothing is ever moved)."""
        self._redis = redis
        self._processors = tuple(processors)
        self._keys = keys or MemoryKeySpace()
        self._settings = settings or SettingsStore(redis, self._keys)
        self._poll = poll_seconds
        self._lock_ms = lock_ms
        self._max_attempts = max_attempts
        self._backoff = backoff_seconds
        self._batch = batch
        self._clock = clock
        self._transcripts = transcripts
        self._tracing = tracing
        self._jobs = jobs
        self._archive = archive
        self._done = redis.register_script(_DONE_LUA)
        self._unlock = redis.register_script(_UNLOCK_LUA)
        self._failures = _Failures()
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self.processed = 0
        self.dead_lettered = 0

    def _dirty(self, shard: int) -> str:
        return self._keys.store.memory_dirty_at(shard)

    def _dead(self, shard: int) -> str:
        return self._keys.store.memory_dead_at(shard)

    async def start(self) -> None:
        self._stopping.clear()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="memory-worker")

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            await self._task
            self._task = None

    async def drain(self, timeout: float) -> None:
        """Stop polling, then process what is dirty now, within `timeout` seconds."""
        await self.stop()
        try:
            await asyncio.wait_for(self.process_available(), timeout)
        except TimeoutError:
            log.warning("memory worker drain timed out; dirty conversations stay queued")

    async def _run(self) -> None:
        outage = OutageLog(log, "memory worker")
        while not self._stopping.is_set():
            try:
                handled = await self.process_available(limit=self._batch)
                outage.succeeded()
            except Exception as exc:  # noqa: BLE001 — the loop must survive a store outage
                outage.failed(exc)
                handled = 0
            if not handled:
                try:
                    await asyncio.wait_for(self._stopping.wait(), self._poll)
                except TimeoutError:
                    pass

    async def process_available(self, limit: int | None = None) -> int:
        """Process dirty conversations that are due now; returns how many were handled."""
        handled = 0
        # One queue per shard in a cluster (one without): each is drained in turn, so a busy
        # shard delays another by at most `limit` conversations.
        for shard in self._keys.store.shard_ids():
            while limit is None or handled < limit:
                due = await self._redis.zrangebyscore(self._dirty(shard), "-inf", self._clock(),
                                                      start=0, num=self._batch, withscores=True)
                progressed = 0
                for member, score in due:
                    progressed += await self._process_member(shard, member, score)
                handled += progressed
                if not due or not progressed:
                    break
        return handled

    async def _process_member(self, shard: int, member: str, score: float) -> int:
        lock_key, token = None, uuid.uuid4().hex
        try:
            key = decode_key(member)
        except CodecError as exc:
            await self._dead_letter(shard, member, f"undecodable member: {exc}")
            return 1
        lock_key = self._keys.conversation(key).lock
        if not await self._redis.set(lock_key, token, nx=True, px=self._lock_ms):
            return 0  # another worker has it
        try:
            await self._process(key)
        except Exception as exc:  # noqa: BLE001 — a processor failed: retried, then dead-lettered
            return await self._failed(shard, member, exc)
        finally:
            await self._unlock(keys=[lock_key], args=[token])
        self._failures.attempts.pop(member, None)
        await self._done(keys=[self._dirty(shard)], args=[member, repr(score)])
        self.processed += 1
        return 1

    async def _process(self, key: ConversationKey) -> None:
        settings = await self._settings.get(key.tenant, key.user)
        if not settings.memory:
            return
        store_keys = self._keys.store.conversation(key)
        mem_keys = self._keys.conversation(key)
        transcript, seen, tombstones = await asyncio.gather(
            self._transcript(key, store_keys.transcript), self._redis.get(mem_keys.processed),
            self._redis.mget(self._keys.store.erased(key.tenant, key.user), store_keys.deleted))
        erased = max((t for t in tombstones if t is not None), key=int, default=None)
        if erased is not None and all(erased_before(erased, m.created_at) for m in transcript):
            return  # erased or deleted, and nothing newer is here: write nothing
        update = MemoryUpdate(key, transcript, _new_since(transcript, seen), settings)
        with job_span(self._tracing, "gateway.memory", key, **{
                "gateway.messages": len(transcript), "gateway.new_messages": len(update.new)}):
            for processor in self._processors:
                with job_span(self._tracing, JOB_SPANS.get(processor.name,
                                                           f"memory.{processor.name}"), key):
                    await processor.process(update)
        if transcript:
            await self._redis.set(mem_keys.processed, f"{len(transcript)}:{transcript[-1].id}")
            if self._archive is not None:
                # Only now: every message of `transcript` is indexed and compacted.
                await self._archive(key, transcript)

    async def _transcript(self, key: ConversationKey, list_key: str
                          ) -> tuple[StoredMessage, ...]:
        if self._transcripts is not None:
            return await self._transcripts(key)
        # Without a transcript reader (tests): the list as stored, which must be plaintext.
        return tuple(decode_stored(item) for item in await self._redis.lrange(list_key, 0, -1))

    async def _failed(self, shard: int, member: str, exc: Exception) -> int:
        attempts = self._failures.attempts.get(member, 0) + 1
        self._failures.attempts[member] = attempts
        log.error("memory processing of %s failed (attempt %d/%d): %r", member, attempts,
                  self._max_attempts, exc, exc_info=exc)
        if attempts >= self._max_attempts:
            self._failures.attempts.pop(member, None)
            await self._dead_letter(shard, member, repr(exc))
            return 1
        if self._jobs is not None:
            await self._jobs.retried("memory")
        # Not due again until the backoff has passed (a new turn makes it due sooner).
        retry_at = self._clock() + self._backoff * 2 ** (attempts - 1)
        await self._redis.zadd(self._dirty(shard), {member: retry_at}, xx=True)
        return 1

    async def _dead_letter(self, shard: int, member: str, error: str) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(self._dead(shard), member, error)
            pipe.incr(f"{self._dead(shard)}:count")
            pipe.zrem(self._dirty(shard), member)
            await pipe.execute()
        self.dead_lettered += 1
        log.error("memory processing of %s dead-lettered: %s", member, error)


def _new_since(transcript: tuple[StoredMessage, ...], seen: str | None) -> tuple[StoredMessage, ...]:
    """Messages after the last processed one; everything if it is no longer on the branch."""
    if not seen:
        return transcript
    count, _, last_id = seen.partition(":")
    n = int(count) if count.isdigit() else 0
    if 0 < n <= len(transcript) and transcript[n - 1].id == last_id:
        return transcript[n:]
    return transcript
