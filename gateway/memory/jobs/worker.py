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
  (SET NX PX lock, renewed by a heartbeat while the job runs), since processors
  read-modify-write per-conversation state;
- fenced: every write of a job goes through its `JobFence` (gateway/memory/jobs/fence.py),
  atomically refused once the user is erased or the conversation deleted; the heartbeat also
  looks at the tombstones and cancels a job whose fence tripped, so an erase waiting for the
  job's lock (gateway/memory/erasure.py) sees it released within one heartbeat;
- bounded: one run processes at most `slice_messages` new messages (`MemoryUpdate` holds the
  transcript up to the slice's end); a conversation with more to do stays dirty and goes to
  the back of the queue, and due conversations are taken in turn by tenant
  (gateway/memory/jobs/schedule.py), so one large conversation or one tenant's backlog does
  not hold the worker for everyone;
- retried: a conversation failing `max_attempts` times in a row is moved to a dead-letter
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
import enum
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Protocol, Sequence

import redis.asyncio as aioredis

from gateway.core.ids import ConversationKey
from gateway.core.messages import StoredMessage
from gateway.ops.job_metrics import JobMetrics
from gateway.memory.jobs.fence import Heartbeat, JobFence, JobFenced, Stopped
from gateway.memory.jobs.schedule import taking_turns
from gateway.memory.records.keys import MemoryKeySpace
from gateway.memory.records.settings_store import SettingsStore, UserSettings
from gateway.memory.records.writes import Writes
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
# Move the member to the back of the queue (score ARGV[3]) only if its score is still the one
# we processed (a newer mark already says when it is due).
_REQUEUE_LUA = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) == tonumber(ARGV[2]) then
  return redis.call('ZADD', KEYS[1], 'XX', ARGV[3], ARGV[1])
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
    """The applied active branch, oldest first, up to the end of this run's slice."""
    new: tuple[StoredMessage, ...]
    """Its messages this worker has not processed before (all of them after a fork), at
    most `slice_messages`: the end of `transcript`."""
    settings: UserSettings
    writes: Writes
    """The job's fence: every write a processor makes goes through its transactions."""


class MemoryProcessor(Protocol):
    name: str

    async def process(self, update: MemoryUpdate) -> None: ...


class Outcome(enum.Enum):
    DONE = "done"        # every message processed: leaves the queue (unless marked again)
    MORE = "more"        # a slice processed, more to do: to the back of the queue
    FENCED = "fenced"    # erased or deleted meanwhile: stopped, nothing more written
    LOST = "lost"        # the lock expired under the job: another worker may have it


@dataclass
class _Failures:
    attempts: dict[str, int] = field(default_factory=dict)


class MemoryWorker:
    def __init__(self, redis: aioredis.Redis, processors: Sequence[MemoryProcessor], *,
                 keys: MemoryKeySpace | None = None, settings: SettingsStore | None = None,
                 poll_seconds: float = 0.2, lock_ms: int = 60_000, max_attempts: int = 5,
                 backoff_seconds: float = 0.5, batch: int = 8,
                 heartbeat_seconds: float = 1.0, slice_messages: int | None = None,
                 window: int = 512, concurrency: int = 1,
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
        nothing is ever moved). `heartbeat_seconds`: how often a running job's lock is renewed
        and its fence looked at (less than half of `lock_ms`). `slice_messages`: the most new
        messages one run processes (None: all). `window`: how many of the oldest due
        conversations are read at once and taken in turn by tenant. `concurrency`: how many
        conversations this worker processes at once (`start`): more lets others go on while
        a run waits on an LLM; CPU work still shares one core."""
        if concurrency < 1:
            raise ValueError("concurrency must be positive")
        if slice_messages is not None and slice_messages < 1:
            raise ValueError("slice_messages must be positive")
        self._redis = redis
        self._processors = tuple(processors)
        self._keys = keys or MemoryKeySpace()
        self._settings = settings or SettingsStore(redis, self._keys)
        self._poll = poll_seconds
        self._lock_ms = lock_ms
        self._max_attempts = max_attempts
        self._backoff = backoff_seconds
        self._batch = batch
        self._heartbeat = Heartbeat(redis, seconds=heartbeat_seconds, lock_ms=lock_ms)
        self._slice = slice_messages
        self._window = max(window, batch)
        self._clock = clock
        self._transcripts = transcripts
        self._tracing = tracing
        self._jobs = jobs
        self._archive = archive
        self._done = redis.register_script(_DONE_LUA)
        self._requeue = redis.register_script(_REQUEUE_LUA)
        self._unlock = redis.register_script(_UNLOCK_LUA)
        self._failures = _Failures()
        self._published: float | None = None
        self._concurrency = concurrency
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        self.processed = 0
        """Conversations whose every message was processed (runs that finished one)."""
        self.slices = 0
        """Runs of the processors, each over at most `slice_messages` new messages."""
        self.fenced = 0
        """Runs stopped because the user was erased or the conversation deleted."""
        self.dead_lettered = 0

    @property
    def processors(self) -> tuple[MemoryProcessor, ...]:
        """The processors each run applies, in order."""
        return self._processors

    def _dirty(self, shard: int) -> str:
        return self._keys.store.memory_dirty_at(shard)

    def _dead(self, shard: int) -> str:
        return self._keys.store.memory_dead_at(shard)

    async def start(self) -> None:
        """`concurrency` loops, each taking one conversation at a time (the locks keep two
        from taking the same)."""
        self._stopping.clear()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._run(), name=f"memory-worker-{n}")
                       for n in range(self._concurrency)]

    async def stop(self) -> None:
        self._stopping.set()
        tasks, self._tasks = self._tasks, []
        await asyncio.gather(*tasks)

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
        """Process dirty conversations that are due now (a slice of each); returns how many
        runs were made."""
        handled = 0
        # One queue per shard in a cluster (one without): each is drained in turn, so a busy
        # shard delays another by at most `limit` runs.
        for shard in self._keys.store.shard_ids():
            while limit is None or handled < limit:
                due = await self._redis.zrangebyscore(self._dirty(shard), "-inf", self._clock(),
                                                      start=0, num=self._window,
                                                      withscores=True)
                progressed = 0
                for member, score in taking_turns(due):
                    if limit is not None and handled + progressed >= limit:
                        break
                    progressed += await self._process_member(shard, member, score)
                handled += progressed
                if not due or not progressed:
                    break
        await self._publish_oldest()
        return handled

    async def _publish_oldest(self) -> None:
        """Tell /metrics when the conversation waiting longest was marked (only a change)."""
        if self._jobs is None:
            return
        async with self._redis.pipeline(transaction=False) as pipe:  # one round trip
            for shard in self._keys.store.shard_ids():
                pipe.zrange(self._dirty(shard), 0, 0, withscores=True)
            firsts = await pipe.execute()
        oldest = min((score for first in firsts for _, score in first), default=None)
        if oldest != self._published:
            await self._jobs.memory_oldest(oldest)
            self._published = oldest

    async def _process_member(self, shard: int, member: str, score: float) -> int:
        token = uuid.uuid4().hex
        try:
            key = decode_key(member)
        except CodecError as exc:
            await self._dead_letter(shard, member, f"undecodable member: {exc}")
            return 1
        lock_key = self._keys.conversation(key).lock
        if not await self._redis.set(lock_key, token, nx=True, px=self._lock_ms):
            return 0  # another worker has it
        fence: JobFence | None = None
        try:
            if await self._redis.zscore(self._dirty(shard), member) is None:
                return 0  # done meanwhile by another loop or worker (read in an older window)
            fence = await JobFence.open(self._redis, self._keys.store, key)
            outcome = await self._run_job(key, fence, lock_key, token)
        except Exception as exc:  # noqa: BLE001 — a processor failed: retried, then dead-lettered
            return await self._failed(shard, member, exc, fence)
        finally:
            await self._unlock(keys=[lock_key], args=[token])
        self._failures.attempts.pop(member, None)
        if outcome is Outcome.MORE:
            await self._requeue(keys=[self._dirty(shard)],
                                args=[member, repr(score), repr(self._clock())])
        elif outcome is not Outcome.LOST:
            await self._done(keys=[self._dirty(shard)], args=[member, repr(score)])
        if outcome is Outcome.DONE:
            self.processed += 1
        elif outcome is Outcome.FENCED:
            self.fenced += 1
            log.info("memory work on %s stopped: erased or deleted meanwhile", member)
        elif outcome is Outcome.LOST:
            log.warning("memory work on %s lost its lock (heartbeat late); left queued", member)
        return 1

    async def _run_job(self, key: ConversationKey, fence: JobFence, lock_key: str,
                       token: str) -> Outcome:
        """Run the job under its heartbeat (`fence.Heartbeat`). Raises what the
        job raised, unless it was fenced."""
        try:
            result = await self._heartbeat.run(self._process(key, fence), fence, lock_key, token)
        except JobFenced:
            return Outcome.FENCED
        if result is Stopped.FENCED:
            return Outcome.FENCED
        return Outcome.LOST if result is Stopped.LOST else result

    async def _process(self, key: ConversationKey, fence: JobFence) -> Outcome:
        settings = await self._settings.get(key.tenant, key.user)
        if not settings.memory:
            return Outcome.DONE
        store_keys = self._keys.store.conversation(key)
        mem_keys = self._keys.conversation(key)
        transcript, seen = await asyncio.gather(
            self._transcript(key, store_keys.transcript), self._redis.get(mem_keys.processed))
        erased = fence.latest
        if erased is not None and (not transcript or any(erased_before(erased, m.created_at)
                                                         for m in transcript)):
            # Erased or deleted, and the sweep of its keys has not ended (a message from
            # before the tombstone is still here) or nothing is left: write nothing.
            return Outcome.DONE
        new = _new_since(transcript, seen)
        start = len(transcript) - len(new)
        end = len(transcript) if self._slice is None else min(len(transcript),
                                                               start + self._slice)
        part = transcript[:end]
        update = MemoryUpdate(key, part, part[start:], settings, fence)
        with job_span(self._tracing, "gateway.memory", key, **{
                "gateway.messages": len(part), "gateway.new_messages": len(update.new)}):
            for processor in self._processors:
                await fence.check()  # an erase since the last step: stop before this one
                with job_span(self._tracing, JOB_SPANS.get(processor.name,
                                                           f"memory.{processor.name}"), key):
                    await processor.process(update)
        self.slices += 1
        if part:
            async with fence.transaction() as pipe:
                pipe.set(mem_keys.processed, f"{len(part)}:{part[-1].id}")
                await pipe.execute()
            if self._archive is not None:
                # Only now: every message of `part` is indexed and compacted.
                await self._archive(key, part)
        return Outcome.MORE if end < len(transcript) else Outcome.DONE

    async def _transcript(self, key: ConversationKey, list_key: str
                          ) -> tuple[StoredMessage, ...]:
        if self._transcripts is not None:
            return await self._transcripts(key)
        # Without a transcript reader (tests): the list as stored, which must be plaintext.
        return tuple(decode_stored(item) for item in await self._redis.lrange(list_key, 0, -1))

    async def _failed(self, shard: int, member: str, exc: Exception,
                      fence: JobFence | None) -> int:
        if fence is not None:
            try:
                await fence.check()
            except JobFenced:
                # It failed because (or after) the user was erased: nothing to retry.
                self._failures.attempts.pop(member, None)
                self.fenced += 1
                log.info("memory work on %s stopped: erased or deleted meanwhile (%r)",
                         member, exc)
                return 1
        attempts = self._failures.attempts.get(member, 0) + 1
        self._failures.attempts[member] = attempts
        log.error("memory processing of %s failed (attempt %d/%d): %r", member, attempts,
                  self._max_attempts, exc, exc_info=exc)
        if attempts >= self._max_attempts:
            self._failures.attempts.pop(member, None)
            await self._dead_letter(shard, member, repr(exc), fence)
            return 1
        if self._jobs is not None:
            await self._jobs.retried("memory")
        # Not due again until the backoff has passed (a new turn makes it due sooner).
        retry_at = self._clock() + self._backoff * 2 ** (attempts - 1)
        await self._redis.zadd(self._dirty(shard), {member: retry_at}, xx=True)
        return 1

    async def _dead_letter(self, shard: int, member: str, error: str,
                           fence: JobFence | None = None) -> None:
        """Move `member` to the dead letters; through the job's fence when there is one (an
        erased user's ids are not written back)."""
        try:
            async with (fence.transaction() if fence is not None
                        else self._redis.pipeline(transaction=True)) as pipe:
                pipe.hset(self._dead(shard), member, error)
                pipe.incr(f"{self._dead(shard)}:count")
                pipe.zrem(self._dirty(shard), member)
                await pipe.execute()
        except JobFenced:
            await self._redis.zrem(self._dirty(shard), member)
            return
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
