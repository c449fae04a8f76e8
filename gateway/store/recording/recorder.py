"""The recorder: applies enqueued turns (stream `gw:records`, group `recorders`) to transcripts.
In a Redis Cluster each shard has its stream, consumed by a recorder of its own
(gateway/store/recording/sharded.py); everything below holds per stream.

Background work is tracked, bounded, drained and durable:
- tracked: worker tasks are held by the Recorder and ended by `stop()`/`drain()`;
- bounded: each read takes at most `batch` entries; a failing job is retried with exponential
  backoff at most `max_attempts` times, then dead-lettered;
- drained: `drain(timeout)` stops reading, then applies what is left, within the timeout;
- durable: an entry leaves the stream only in the same MULTI/EXEC that applies (or
  dead-letters, or skips as a duplicate) it; a crashed consumer's entries stay in the group's
  pending list and are re-read by the same consumer name at start, or claimed (XAUTOCLAIM) by
  any other consumer once idle for `claim_idle_ms`.

Order per conversation: the job with seq n applies only when the applied seq is n-1. A job at
or below the applied seq is a duplicate (acked, skipped: applying is idempotent). A job above
it waits for the missing one, unless that one can never arrive: a seq that is not in the
pending hash is lost, and the conversation skips past it; a seq that is pending but whose
stream entry has vanished for `gap_timeout_ms` is enqueued again. Nothing is dropped silently.

Attempt counts live in this process: after a crash a reclaimed job starts counting anew.

Cost per job, independent of the conversation's length: the transcript is read through a
`TranscriptCache` (only the elements appended since this recorder last read it are sent and
decoded), together with the applied seq and the erase tombstone in one script under WATCH.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from enum import Enum
from typing import Any, Callable

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError, WatchError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.core.ids import ConversationKey
from gateway.core.transcript import apply_turn
from gateway.ops.job_metrics import JobMetrics
from gateway.store.codec import decode_record, encode_branch, encode_key, encode_stored
from gateway.store.encryption.crypto import NO_ENCRYPTION, Encryption
from gateway.store.keys import ConversationKeys, KeySpace
from gateway.store.outage import OutageLog
from gateway.store.recording.jobs import (EntryState, Job, MalformedEntry, parse_entry,
                                       predates_erase, stream_entries)
from gateway.store.recording.usage import queue_usage
from gateway.store.transcript_cache import TRANSCRIPT_LUA, TranscriptCache
from gateway.store.redis_store import LATER_TOMBSTONE_LUA, require_decoded

log = logging.getLogger("gateway.recorder")

_WATCH_RETRIES = 100  # optimistic transactions on one conversation; contention is short-lived
_UNREACHABLE = (RedisConnectionError, RedisTimeoutError, OSError)

# KEYS: record stream. ARGV: group, consumer. Deletes the consumer only if nothing is pending
# for it (DELCONSUMER would drop its pending entries); returns 1 if deleted. Atomic: no entry
# can be delivered to it between the check and the delete.
_DELCONSUMER_IF_IDLE_LUA = """
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if #pending > 0 then return 0 end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 1
"""


# KEYS: transcript, its archive, applied seq, the user's erase tombstone, the conversation's
# tombstone. ARGV: as TRANSCRIPT_LUA. Returns {how, elements, offset (TRANSCRIPT_LUA), applied
# ("" if none), the later tombstone ("" if none)}.
_READ_LUA = TRANSCRIPT_LUA + LATER_TOMBSTONE_LUA + """
return {how, elements, offset, redis.call('GET', KEYS[3]) or '',
        later_tombstone(KEYS[4], KEYS[5]) or ''}
"""


class _Outcome(Enum):
    DONE = "done"        # applied, duplicate, skipped or dead-lettered: acked and deleted
    WAITING = "waiting"  # an earlier seq of the conversation is not applied yet
    RETRY = "retry"      # failed; retried after a backoff
    AGAIN = "again"      # state changed under us (a lost seq was skipped): try again now


class Recorder:
    """Consumer-group worker applying record jobs; see the module docstring for invariants."""

    def __init__(self, client: aioredis.Redis, keys: KeySpace | None = None, *,
                 consumer_prefix: str | None = None, workers: int = 1, max_attempts: int = 5,
                 backoff_seconds: float = 0.2, claim_idle_ms: int = 30_000,
                 block_ms: int = 1000, batch: int = 16, gap_poll_ms: int = 50,
                 gap_timeout_ms: int | None = None, clock: Callable[[], float] = time.time,
                 gap_clock: Callable[[], float] = time.monotonic,
                 jobs: JobMetrics | None = None,
                 encryption: Encryption = NO_ENCRYPTION, shard: int = 0,
                 transcripts: TranscriptCache | None = None):
        """`gap_clock`: the clock (seconds) `gap_timeout_ms` is counted on; a test steps it.
        `jobs`: where apply latency and retries are counted for /metrics (none: nowhere).
        `shard`: the shard whose record stream this recorder consumes (a cluster has one
        stream per shard, each consumed by a recorder of its own: see ShardedRecorder).
        `transcripts`: the process's cache of decoded transcripts, shared with its other
        readers of them (none: one of its own)."""
        require_decoded(client)
        if workers < 1 or max_attempts < 1 or batch < 1 or block_ms < 1:
            raise ValueError("workers, max_attempts, batch and block_ms must be positive")
        if claim_idle_ms <= block_ms:
            # A live consumer refreshes its pending entries once per loop (at most block_ms);
            # a shorter claim_idle_ms would let others steal entries from live consumers.
            raise ValueError("claim_idle_ms must be larger than block_ms")
        self._redis = client
        self.keys = keys or KeySpace()
        if shard not in self.keys.shard_ids():
            raise ValueError(f"shard {shard} is not one of the key space's shards")
        self.shard = shard
        self._stream = self.keys.records_at(shard)
        self.encryption = encryption
        self.transcripts = (transcripts if transcripts is not None
                            else TranscriptCache(encryption=encryption))
        """Decoded transcripts of the conversations this recorder applied turns to (and of any
        the cache's other readers loaded)."""
        prefix = consumer_prefix or f"{socket.gethostname()}-{os.getpid()}"
        self.consumers = tuple(f"{prefix}-{n}" for n in range(workers))
        self.max_attempts = max_attempts
        self.backoff_seconds = backoff_seconds
        self.claim_idle_ms = claim_idle_ms
        self.block_ms = block_ms
        self.batch = batch
        self.gap_poll_ms = gap_poll_ms
        self.gap_timeout_ms = gap_timeout_ms if gap_timeout_ms is not None else 2 * claim_idle_ms
        self._clock = clock
        self._gap_clock = gap_clock
        self._jobs = jobs
        self._state: dict[str, dict[str, EntryState]] = {c: {} for c in self.consumers}
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        self._group_ready = False
        # Counters, for metrics and tests.
        self.applied = 0
        self.duplicates = 0
        self.retried = 0
        self.dead_lettered = 0
        self.reclaimed = 0
        self.skipped = 0        # lost seqs skipped past
        self.reenqueued = 0     # pending turns whose stream entry had vanished

    # -- lifecycle -------------------------------------------------------------------------

    async def ensure_group(self) -> None:
        if self._group_ready:
            return
        try:
            # id "0": jobs enqueued before the first recorder ever ran are applied too.
            await self._redis.xgroup_create(self._stream, self.keys.group, id="0",
                                            mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True

    async def start(self) -> None:
        """Spawn the worker tasks (one consumer each). They run until `stop()`/`drain()`."""
        if self._tasks:
            raise RuntimeError("recorder already started")
        try:
            await self.ensure_group()
        except (RedisConnectionError, RedisTimeoutError) as exc:
            # The gateway starts, and serves, with the store down: the workers create the
            # group once it answers (a read on a missing group recreates it).
            log.warning("store unreachable when the recorder started (%r); retrying in the "
                        "background", exc)
        self._stopping.clear()
        self._tasks = [asyncio.create_task(self._work(c), name=f"recorder:{c}")
                       for c in self.consumers]

    async def stop(self, timeout: float | None = None) -> None:
        """Stop the workers after their current step (a blocked read ends within block_ms);
        after `timeout` seconds they are cancelled. Entries not applied stay pending."""
        self._stopping.set()
        tasks, self._tasks = self._tasks, []
        if not tasks:
            return
        wait = self.block_ms / 1000 + 5 if timeout is None else max(0.0, timeout)
        _done, late = await asyncio.wait(tasks, timeout=wait)
        for task in late:
            task.cancel()  # e.g. stuck on a dead connection; its entries stay pending
        await asyncio.gather(*tasks, return_exceptions=True)

    async def drain(self, timeout: float) -> int:
        """Stop reading, then apply everything available, within `timeout` seconds.
        Returns the number of entries finished while draining; what is left stays pending
        for the next start or another replica. A store that cannot be reached ends the
        drain (logged), never raises: nothing is lost, the jobs are in the store."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        await self.stop(timeout)
        try:
            async with asyncio.timeout_at(deadline):
                return await self.process_available()
        except TimeoutError:
            log.warning("recorder drain timed out after %.1fs; unapplied jobs stay queued",
                        timeout)
        except _UNREACHABLE as exc:
            log.warning("recorder drain skipped: the store is unreachable (%r); unapplied "
                        "jobs stay queued in it", exc)
        return 0

    async def remove_consumers(self, stale_after_ms: int | None = None) -> list[str]:
        """Delete this recorder's consumers from the group, and — with `stale_after_ms` —
        other consumers idle that long (processes that died), each only if it has no pending
        entries (checked and deleted atomically, so no entry is ever dropped from the
        pending list). Call after `stop()`/`drain()`. Returns the names deleted; a store that
        cannot be reached deletes nothing (logged)."""
        try:
            infos = await self._redis.xinfo_consumers(self._stream, self.keys.group)
            own = set(self.consumers)
            candidates = {i["name"] for i in infos if i["name"] in own or (
                stale_after_ms is not None and int(i.get("idle", 0)) >= stale_after_ms)}
            removed = []
            for name in sorted(candidates):
                if await self._redis.eval(_DELCONSUMER_IF_IDLE_LUA, 1, self._stream,
                                          self.keys.group, name):
                    removed.append(name)
        except ResponseError as exc:
            if "NOGROUP" in str(exc) or "no such key" in str(exc):
                return []
            raise
        except _UNREACHABLE as exc:
            log.warning("recorder consumers not removed: the store is unreachable (%r)", exc)
            return []
        if removed:
            log.info("recorder removed idle consumers %s from group %s", ", ".join(removed),
                     self.keys.group)
        return removed

    async def process_available(self) -> int:
        """Apply everything that can be applied now: this recorder's own pending entries,
        reclaimable ones, and new ones. Waits out retry backoffs of its own failed jobs, so
        on return every job it holds is applied, dead-lettered, or waiting on another
        consumer. Needs no background task (inline mode). Returns entries finished."""
        await self.ensure_group()
        finished = 0
        while True:
            results = [await self._own_pending(c) for c in self.consumers]
            results.append(await self._claim(self.consumers[0]))
            results.append(await self._read_new(self.consumers[0], block_ms=None))
            done = sum(r[0] for r in results)
            seen = sum(r[1] for r in results)
            finished += done
            if done or seen:
                continue
            retry_at = [s.retry_at for states in self._state.values() for s in states.values()
                        if s.attempts]
            if not retry_at:
                return finished
            await asyncio.sleep(max(0.0, min(retry_at) - time.monotonic()))

    # -- the worker --------------------------------------------------------------------------

    async def _work(self, consumer: str) -> None:
        loop = asyncio.get_running_loop()
        next_claim = 0.0
        outage = OutageLog(log, f"recorder worker {consumer}")
        while not self._stopping.is_set():
            try:
                await self._own_pending(consumer)
                if loop.time() >= next_claim:
                    await self._claim(consumer)
                    next_claim = loop.time() + self.claim_idle_ms / 2000
                if self._stopping.is_set():
                    break
                await self._read_new(consumer, block_ms=self._wait_ms(consumer))
                outage.succeeded()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # The worker must outlive store outages and bugs: whatever it held stays in
                # the group's pending list (nothing is lost), so log, back off, go on.
                outage.failed(exc)
                try:
                    await asyncio.wait_for(self._stopping.wait(), self.backoff_seconds)
                except TimeoutError:
                    pass

    def _wait_ms(self, consumer: str) -> int:
        """How long to block for new entries: shorter while own entries wait for a retry."""
        wait = float(self.block_ms)
        now = time.monotonic()
        for state in self._state[consumer].values():
            if state.gap_since is not None:
                wait = min(wait, self.gap_poll_ms)
            elif state.attempts:
                wait = min(wait, (state.retry_at - now) * 1000)
        return max(1, int(wait))  # BLOCK 0 would mean forever

    # -- reading -------------------------------------------------------------------------------

    async def _own_pending(self, consumer: str) -> tuple[int, int]:
        """Re-read this consumer's pending entries (after a crash, a gap or a failure)."""
        states = self._state[consumer]
        seen: set[str] = set()
        finished = 0
        cursor = "0"
        while True:
            reply = await self._group_call(self._redis.xreadgroup, self.keys.group, consumer,
                                           {self._stream: cursor}, count=self.batch)
            entries = stream_entries(reply)
            if not entries:
                break
            for entry_id, fields in entries:
                seen.add(entry_id)
                finished += await self._handle(consumer, entry_id, fields)
            cursor = entries[-1][0]
        for gone in set(states) - seen:
            del states[gone]  # acked meanwhile, or claimed by another consumer
        return finished, 0

    async def _claim(self, consumer: str) -> tuple[int, int]:
        """Take over entries idle longer than claim_idle_ms (their consumer is gone)."""
        finished = claimed = 0
        cursor = "0-0"
        for _ in range(1000):  # bounded: each page advances the cursor
            reply = await self._group_call(self._redis.xautoclaim, self._stream,
                                           self.keys.group, consumer, self.claim_idle_ms,
                                           start_id=cursor, count=self.batch)
            cursor, entries = reply[0], reply[1]
            for entry_id, fields in entries:
                if entry_id is None:
                    continue  # Redis 6.2 lists entries deleted while pending as nil
                claimed += 1
                log.info("recorder %s reclaimed job %s", consumer, entry_id)
                finished += await self._handle(consumer, entry_id, fields)
            if cursor in ("0-0", b"0-0"):
                break
        self.reclaimed += claimed
        return finished, claimed

    async def _read_new(self, consumer: str, block_ms: int | None) -> tuple[int, int]:
        reply = await self._group_call(self._redis.xreadgroup, self.keys.group, consumer,
                                       {self._stream: ">"}, count=self.batch,
                                       block=block_ms)
        entries = stream_entries(reply)
        finished = 0
        for entry_id, fields in entries:
            finished += await self._handle(consumer, entry_id, fields)
        return finished, len(entries)

    async def _group_call(self, command: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return await command(*args, **kwargs)
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
        # The stream or its group was deleted under us (a FLUSHDB, an operator): make it again.
        log.warning("recorder group %s on %s vanished; creating it again", self.keys.group,
                    self._stream)
        self._group_ready = False
        await self.ensure_group()
        return await command(*args, **kwargs)

    # -- one job -------------------------------------------------------------------------------

    async def _handle(self, consumer: str, entry_id: str,
                      fields: dict[str, str] | None) -> int:
        """Process one entry; 1 if it is finished (acked), 0 if it stays pending."""
        state = self._state[consumer].setdefault(entry_id, EntryState())
        if not fields:
            # The entry was deleted from the stream while pending: nothing left to read here.
            # Its turn is still in the pending hash; the gap check enqueues it again.
            log.warning("record job %s was deleted from the stream while pending", entry_id)
            await self._ack(entry_id)
            self._state[consumer].pop(entry_id, None)
            return 1
        if state.attempts and state.retry_at > time.monotonic():
            return 0
        started = time.perf_counter()
        try:
            job = parse_entry(entry_id, fields)
            outcome = await self._apply(job, state)
            while outcome is _Outcome.AGAIN:
                outcome = await self._apply(job, state)
        except (RedisConnectionError, RedisTimeoutError):
            raise  # the store is down, not the job at fault: no attempt is counted
        except Exception as exc:
            # Any other error is this job's failure: counted, retried, finally dead-lettered.
            outcome = await self._failed(entry_id, fields, state, exc)
        if outcome is _Outcome.DONE:
            self._state[consumer].pop(entry_id, None)
            if self._jobs is not None:
                await self._jobs.observe("record_apply", time.perf_counter() - started)
            return 1
        return 0

    async def _apply(self, job: Job, state: EntryState) -> _Outcome:
        ck = self.keys.conversation(job.key)
        async with self._redis.pipeline(transaction=True) as pipe:
            for _ in range(_WATCH_RETRIES):
                try:
                    # Watching the tombstones too: an erase or a delete landing before our
                    # EXEC aborts it.
                    erased_key = self.keys.erased(job.key.tenant, job.key.user)
                    await pipe.watch(ck.transcript, ck.applied, erased_key, ck.deleted)
                    # One round trip reads the tombstone, the applied seq and what is new in
                    # the transcript since this process last read it (TRANSCRIPT_LUA): the
                    # cost of a job does not grow with the conversation.
                    cached = self.transcripts.get(job.key)
                    how, elements, offset, applied_raw, erased = await pipe.eval(
                        _READ_LUA, 5, ck.transcript, ck.archive, ck.applied, erased_key,
                        ck.deleted,
                        *self.transcripts.args(cached))
                    if predates_erase(erased or None, job, self.encryption):
                        # Erased or deleted since: drop it, write nothing. Its pending entry
                        # only if it is this job's: after a delete, the id may be a new
                        # conversation whose seqs started again at 1.
                        own = await pipe.hget(ck.pending, str(job.seq)) == job.payload
                        pipe.multi()
                        if own:
                            pipe.hdel(ck.pending, str(job.seq))
                        self._queue_ack(pipe, job.entry_id)
                        await pipe.execute()
                        return _Outcome.DONE
                    applied = int(applied_raw or 0)
                    if job.seq <= applied:
                        pipe.multi()
                        self._queue_ack(pipe, job.entry_id)
                        await pipe.execute()
                        self.duplicates += 1
                        return _Outcome.DONE
                    if job.seq > applied + 1:
                        await pipe.reset()
                        return await self._gap(job, ck, state)
                    crypto, tenant = self.encryption, job.key.tenant
                    record = decode_record(crypto.open(tenant, job.payload))
                    stored = self.transcripts.resolve(job.key, cached, how, elements, offset)
                    edit = apply_turn(stored, record)
                    now = self._clock()
                    pipe.multi()
                    if edit.archives(len(stored)):
                        pipe.rpush(ck.branches, crypto.seal(
                            tenant, encode_branch(now, stored[edit.keep:])))
                        if edit.keep:
                            pipe.ltrim(ck.transcript, 0, edit.keep - 1)
                        else:
                            pipe.delete(ck.transcript)
                    if edit.append:
                        pipe.rpush(ck.transcript, *(crypto.seal(tenant, encode_stored(m))
                                                    for m in edit.append))
                    pipe.set(ck.applied, job.seq)
                    pipe.hdel(ck.pending, str(job.seq))
                    pipe.hset(ck.meta, mapping={
                        "tenant": job.key.tenant, "user": job.key.user,
                        "conversation": job.key.conversation, "updated_at": repr(now),
                        # Archived messages count: they are the branch's oldest.
                        "message_count": int(offset) + edit.keep + len(edit.append)})
                    pipe.hsetnx(ck.meta, "created_at", repr(now))
                    pipe.zadd(self.keys.memory_dirty_of(job.key), {encode_key(job.key): now})
                    if record.usage is not None:  # counted once: with the turn it belongs to
                        queue_usage(pipe, self.keys, job.key, record.usage)
                    self._queue_ack(pipe, job.entry_id)
                    await pipe.execute()
                    self.applied += 1
                    return _Outcome.DONE
                except WatchError:
                    continue  # another recorder changed the conversation: read again
        raise RuntimeError(f"conversation {job.key} stayed contended for {_WATCH_RETRIES} tries")

    async def _gap(self, job: Job, ck: ConversationKeys, state: EntryState) -> _Outcome:
        """Job seq is ahead of applied+1: wait for the missing seq, or stop waiting for it."""
        async with self._redis.pipeline(transaction=True) as pipe:
            await pipe.watch(ck.applied, ck.pending)
            applied = int(await pipe.get(ck.applied) or 0)
            if job.seq <= applied + 1:
                return _Outcome.AGAIN
            missing = applied + 1
            pending = {int(s) for s in await pipe.hkeys(ck.pending)}
            if missing not in pending:
                # Lost for good (a pending seq is removed only when applied or dead-lettered):
                # skip to the next seq that exists rather than block the conversation forever.
                resume = min([s for s in pending if s > applied] + [job.seq])
                pipe.multi()
                pipe.set(ck.applied, resume - 1)
                try:
                    await pipe.execute()
                except WatchError:
                    return _Outcome.AGAIN
                log.warning("conversation %s: seqs %d..%d were lost; skipped", job.key,
                            missing, resume - 1)
                self.skipped += resume - missing
                return _Outcome.AGAIN
        now = self._gap_clock()
        if state.gap_since is None:
            state.gap_since = now
        elif (now - state.gap_since) * 1000 >= self.gap_timeout_ms:
            state.gap_since = now
            await self._reenqueue_if_vanished(job.key, ck, missing)
        return _Outcome.WAITING

    async def _reenqueue_if_vanished(self, key: ConversationKey, ck: ConversationKeys,
                                     seq: int) -> None:
        # Scan the stream first, then re-check the hash: if the job was applied meanwhile
        # the hash no longer has it; if it was in the stream, the scan saw it.
        cursor = "-"
        while True:
            page = await self._redis.xrange(self._stream, cursor, "+", count=1000)
            for entry_id, fields in page:
                if (fields.get("tenant"), fields.get("user"), fields.get("conversation"),
                        fields.get("seq")) == (key.tenant, key.user, key.conversation, str(seq)):
                    return
            if len(page) < 1000:
                break
            cursor = "(" + page[-1][0]
        payload = await self._redis.hget(ck.pending, str(seq))
        if payload is None:
            return
        await self._redis.xadd(self._stream, {
            "tenant": key.tenant, "user": key.user, "conversation": key.conversation,
            "seq": seq, "payload": payload})
        log.warning("conversation %s: job seq %d had left the stream; enqueued again", key, seq)
        self.reenqueued += 1

    async def _failed(self, entry_id: str, fields: dict[str, str], state: EntryState,
                      exc: Exception) -> _Outcome:
        state.attempts += 1
        if state.attempts >= self.max_attempts:
            log.error("record job %s failed %d times; dead-lettered", entry_id, state.attempts,
                      exc_info=exc)
            await self._dead_letter(entry_id, fields, state.attempts, exc)
            return _Outcome.DONE
        log.warning("record job %s failed (attempt %d of %d); will retry", entry_id,
                    state.attempts, self.max_attempts, exc_info=exc)
        self.retried += 1
        if self._jobs is not None:
            await self._jobs.retried("record")
        state.retry_at = time.monotonic() + self.backoff_seconds * 2 ** (state.attempts - 1)
        return _Outcome.RETRY

    async def _dead_letter(self, entry_id: str, fields: dict[str, str], attempts: int,
                           exc: Exception) -> None:
        """Keep the job with its error, count it, and let the conversation move past it."""
        try:
            job: Job | None = parse_entry(entry_id, fields)
        except MalformedEntry:
            job = None
        dead = {**fields, "error": f"{type(exc).__name__}: {exc}", "attempts": attempts,
                "entry_id": entry_id, "failed_at": repr(self._clock())}
        async with self._redis.pipeline(transaction=True) as pipe:
            for _ in range(_WATCH_RETRIES):
                try:
                    applied = None
                    if job is not None:
                        ck = self.keys.conversation(job.key)
                        await pipe.watch(ck.applied)
                        applied = int(await pipe.get(ck.applied) or 0)
                    pipe.multi()
                    pipe.xadd(self.keys.dead_at(self.shard), dead)
                    pipe.incr(self.keys.dead_count_at(self.shard))
                    if job is not None and applied is not None:
                        pipe.hdel(ck.pending, str(job.seq))
                        if job.seq == applied + 1:
                            pipe.set(ck.applied, job.seq)
                    self._queue_ack(pipe, entry_id)
                    await pipe.execute()
                    self.dead_lettered += 1
                    return
                except WatchError:
                    continue
        raise RuntimeError(f"could not dead-letter {entry_id}: conversation stayed contended")

    def _queue_ack(self, pipe: Any, entry_id: str) -> None:
        # Acked and deleted in the same MULTI as the effect, so the stream does not grow and
        # a crash can never apply a job without acking it (or ack one without applying it).
        pipe.xack(self._stream, self.keys.group, entry_id)
        pipe.xdel(self._stream, entry_id)

    async def _ack(self, entry_id: str) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            self._queue_ack(pipe, entry_id)
            await pipe.execute()
