"""Turns the store could not take, held in process until it is back (a Redis outage).

The request path never waits for the store to return: `Pipeline.record` hands a turn it could
not enqueue to `RecordBuffer.add`, and the buffer's one flusher task enqueues it later.

Invariants:
- bounded: at most `capacity` turns are held; adding one more drops the oldest held turn
  (for a stateless client, a later turn resends the dropped one's messages anyway). Every
  drop is logged at ERROR and counted (`dropped`): nothing leaves the buffer silently;
- ordered: one flusher takes turns strictly first in, first out and does not move past a turn
  until it is enqueued or given up on, so per-conversation order is kept. `holds(key)` tells
  the pipeline to queue a conversation's newer turns behind its buffered ones;
- patient with outages: a store that cannot be reached (connection refused, reset, timeout,
  a server still loading its AOF) is retried with exponential backoff up to
  `retry_max_seconds`, indefinitely; any other error of one turn is retried `max_attempts`
  times, then that turn is dropped (logged with the error, counted);
- drained: the app's lifespan calls `drain(timeout)` at shutdown; what cannot be enqueued by
  then is handed back, in order, and the app writes it to the record journal
  (`gateway.pipeline.record_journal`), whose turns the next start `restore`s here — never dropped.

A turn whose request could not even read the store (`incoming` set, `record` None) is
reconciled against the transcript when it is flushed, exactly as the request would have done,
once: a retry sends the same record. The store's enqueue is idempotent for a retried payload
(`RedisStore.record`), so an enqueue whose reply was lost when the store failed mid-command
is not applied twice.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import logging
import time
from dataclasses import dataclass
from typing import Protocol, Sequence

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.core.ids import ConversationKey
from gateway.core.messages import Message, StoredMessage
from gateway.core.spend import TurnUsage
from gateway.core.transcript import TurnRecord, reconcile

log = logging.getLogger("gateway.record_buffer")

# The store is unreachable, not the turn at fault: retried without counting attempts.
_OUTAGE_ERRORS = (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError)


class TurnSink(Protocol):
    async def load(self, key: ConversationKey) -> tuple[StoredMessage, ...]: ...

    async def record(self, key: ConversationKey, record: TurnRecord) -> object: ...


@dataclass(frozen=True, slots=True)
class BufferedTurn:
    """One turn waiting for the store: a `record` reconciled when the request was served,
    or — when the store could not be read then — the client's non-instruction messages
    (`incoming`) and the `reply`, reconciled when flushed."""

    key: ConversationKey
    request_id: str
    record: TurnRecord | None = None
    incoming: tuple[Message, ...] = ()
    reply: tuple[Message, ...] = ()
    created_at: float = 0.0
    incomplete_reply: bool = False
    usage: TurnUsage | None = None
    """The request's usage counters, for the record made when flushed."""

    async def resolved(self, sink: TurnSink) -> BufferedTurn:
        """This turn with its `record`: reconciled against the stored transcript if the
        request could not do it."""
        if self.record is not None:
            return self
        stored = await sink.load(self.key)
        record = reconcile(self.incoming, stored).record(
            self.reply, created_at=self.created_at, request_id=self.request_id,
            incomplete_reply=self.incomplete_reply and bool(self.reply), usage=self.usage)
        return dataclasses.replace(self, record=record, incoming=(), reply=(), usage=None)


class RecordBuffer:
    """A bounded FIFO of turns and the task that flushes it; see the module docstring."""

    def __init__(self, sink: TurnSink, capacity: int, *, retry_initial_seconds: float = 0.1,
                 retry_max_seconds: float = 1.0, max_attempts: int = 5):
        if capacity < 1 or max_attempts < 1 or retry_initial_seconds <= 0:
            raise ValueError("capacity, max_attempts and retry_initial_seconds must be positive")
        self._sink = sink
        self.capacity = capacity
        self.retry_initial = retry_initial_seconds
        self.retry_max = max(retry_max_seconds, retry_initial_seconds)
        self.max_attempts = max_attempts
        self._items: collections.deque[BufferedTurn] = collections.deque()
        self._inflight: BufferedTurn | None = None
        self._keys: collections.Counter[ConversationKey] = collections.Counter()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._outage_since: float | None = None
        self._left = 0  # turns that were held and are not any more (flushed or dropped)
        self._progress = asyncio.Event()
        # Counters, for metrics and tests.
        self.buffered = 0  # turns ever added (restored ones too)
        self.flushed = 0   # turns enqueued from the buffer
        self.dropped = 0   # turns given up on: overflow, a failing turn

    def __len__(self) -> int:
        return len(self._items) + (self._inflight is not None)

    def holds(self, key: ConversationKey) -> bool:
        """Whether a turn of this conversation waits here (newer ones must queue behind it)."""
        return self._keys[key] > 0

    def add(self, turn: BufferedTurn) -> None:
        """Hold `turn` for the flusher; never blocks, never raises."""
        if len(self) >= self.capacity:
            if self._items:
                self._drop(self._items.popleft(), "the buffer is full (oldest turn dropped)")
            else:  # capacity 1 and its turn is being enqueued right now
                self._keys[turn.key] += 1
                self._drop(turn, "the buffer is full", held=False)
                return
        self._items.append(turn)
        self._keys[turn.key] += 1
        self.buffered += 1
        self._wake.set()

    def restore(self, turns: Sequence[BufferedTurn]) -> None:
        """Hold `turns` (a previous process's, from the journal) ahead of any new turn, beyond
        `capacity` if need be: they were already held once and are not dropped for room.
        Call before `start`; the first `len(turns)` turns to leave are these (`settled`)."""
        if self._task is not None or self._items or self._inflight is not None:
            raise RuntimeError("restore turns into an empty buffer before starting it")
        for turn in turns:
            self._items.append(turn)
            self._keys[turn.key] += 1
        self.buffered += len(turns)
        self._wake.set()

    async def settled(self, count: int) -> None:
        """Wait until the first `count` turns ever held have left the buffer (enqueued or
        given up on): turns leave strictly in the order they were held."""
        while self._left < count:
            self._progress.clear()
            await self._progress.wait()

    def _drop(self, turn: BufferedTurn, reason: str, *, held: bool = True) -> None:
        self._forget(turn)
        self.dropped += 1
        if held:
            self._settle()
        _event(logging.ERROR, "record_buffer_dropped", request_id=turn.request_id,
               tenant=turn.key.tenant, conversation=turn.key.conversation, reason=reason,
               dropped_total=self.dropped)

    def _forget(self, turn: BufferedTurn) -> None:
        self._keys[turn.key] -= 1
        if self._keys[turn.key] <= 0:
            del self._keys[turn.key]

    def _settle(self) -> None:
        self._left += 1
        self._progress.set()

    # -- the flusher -------------------------------------------------------------------------

    async def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("record buffer already started")
        self._task = asyncio.get_running_loop().create_task(self._run(), name="record-buffer")

    async def stop(self) -> None:
        """End the flusher after its current step; held turns stay held."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def drain(self, timeout: float) -> list[BufferedTurn]:
        """Stop the flusher, then flush what is held within `timeout` s (no backoff beyond
        it). Returns the turns the store did not take, oldest first, and holds them no more:
        the caller keeps them (the record journal). A turn whose enqueue was cut short may
        be in the store already; enqueueing it again is a no-op (`RedisStore.record`)."""
        await self.stop()
        try:
            async with asyncio.timeout(timeout):
                await self._flush()
        except TimeoutError:
            pass
        left = ([self._inflight] if self._inflight else []) + list(self._items)
        if left:
            _event(logging.WARNING, "record_buffer_left_at_shutdown", turns=len(left),
                   reason=f"the store did not take them within {timeout:.1f}s")
            for turn in left:
                self._forget(turn)
            self._items.clear()
            self._inflight = None
        return left

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._flush()

    async def _flush(self) -> None:
        """Enqueue held turns in order until none is left (waiting out outages)."""
        delay = self.retry_initial
        attempts = 0
        while self._items:
            turn = self._inflight = self._items.popleft()
            try:
                # Resolved once and kept resolved: a retry sends the very same payload.
                turn = self._inflight = await turn.resolved(self._sink)
                assert turn.record is not None
                if turn.record.messages:
                    await self._sink.record(turn.key, turn.record)
            except asyncio.CancelledError:
                # Stopped mid-enqueue: the turn goes back to the head; drain() retries it.
                self._items.appendleft(turn)
                self._inflight = None
                raise
            except _OUTAGE_ERRORS as exc:
                self._items.appendleft(turn)
                self._inflight = None
                self._note_outage(exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.retry_max)
                continue
            except Exception as exc:  # noqa: BLE001 — this turn's own failure: retried, dropped
                self._inflight = None
                attempts += 1
                if attempts >= self.max_attempts:
                    self._drop(turn, f"failed {attempts} times: {exc!r}")
                    attempts = 0
                else:
                    log.warning("buffered turn of request %s failed (attempt %d of %d): %r",
                                turn.request_id, attempts, self.max_attempts, exc)
                    self._items.appendleft(turn)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, self.retry_max)
                continue
            self._inflight = None
            self._forget(turn)
            self.flushed += 1
            self._settle()
            delay, attempts = self.retry_initial, 0
            if self._outage_since is not None:
                _event(logging.WARNING, "record_buffer_store_back", held=len(self),
                       outage_s=round(time.monotonic() - self._outage_since, 1))
                self._outage_since = None

    def _note_outage(self, exc: BaseException) -> None:
        # Once per outage, not once per retry: the log must stay readable for a long outage.
        if self._outage_since is None:
            self._outage_since = time.monotonic()
            _event(logging.WARNING, "record_buffer_store_unavailable", held=len(self),
                   error=repr(exc))


def _event(level: int, event: str, **fields: object) -> None:
    log.log(level, json.dumps({"event": event, **fields}, ensure_ascii=False))
