"""Bounded, fair memory work: a large conversation is processed in slices with other
conversations taking their turn between them, tenants take turns over the oldest due work, and
/metrics says how long the conversation waiting longest has waited. Counted in runs and in
order of completion, never in time."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from gateway.core.ids import ConversationKey
from gateway.core.messages import Message
from gateway.core.transcript import TurnRecord
from gateway.memory.jobs.worker import MemoryUpdate, MemoryWorker
from gateway.memory.records.keys import MemoryKeySpace
from gateway.ops.job_metrics import JobMetrics, StoredJobMetrics
from gateway.store import RedisStore
from gateway.store.codec import encode_key
from gateway.store.keys import KeySpace
from gateway.store.recording import Recorder

BIG = ConversationKey("tenant-a", "ann", "big")
SMALL_B = tuple(ConversationKey("tenant-b", f"user-{i}", "chat") for i in range(5))


class Log:
    """A processor that notes each run: the conversation, how many new messages, and whether
    the run reached the end of the transcript it was given."""

    name = "log"

    def __init__(self) -> None:
        self.runs: list[tuple[ConversationKey, int, int]] = []

    async def process(self, update: MemoryUpdate) -> None:
        self.runs.append((update.key, len(update.new), len(update.transcript)))


async def record(store: RedisStore, key: ConversationKey, count: int) -> None:
    messages = tuple(Message.of("user" if i % 2 == 0 else "assistant", f"message {i} of {key}")
                     for i in range(count))
    await store.record(key, TurnRecord("append", None, messages))


def completed(runs: list[tuple[ConversationKey, int, int]], sizes: dict[ConversationKey, int],
              ) -> list[ConversationKey]:
    """Conversations in the order their last message was processed."""
    return [key for key, _new, seen in runs if seen == sizes[key]]


async def test_a_large_conversation_is_processed_in_slices_while_others_take_their_turn(
        redis_client):
    store, recorder = RedisStore(redis_client), Recorder(redis_client, consumer_prefix="t")
    await record(store, BIG, 2000)
    for key in SMALL_B:
        await record(store, key, 4)
    await recorder.process_available()  # the large one is marked dirty first: the oldest
    log = Log()
    worker = MemoryWorker(redis_client, [log], slice_messages=100)

    assert await worker.process_available() == 20 + len(SMALL_B)

    sizes = {BIG: 2000, **{key: 4 for key in SMALL_B}}
    order = completed(log.runs, sizes)
    assert order[-1] == BIG and set(order[:-1]) == set(SMALL_B)  # B's all done before A's
    big = [(new, seen) for key, new, seen in log.runs if key == BIG]
    assert big == [(100, 100 * (i + 1)) for i in range(20)]  # 20 slices of 100, in order
    assert worker.slices == 25 and worker.processed == 6
    # Each of B's conversations was processed once, with its whole transcript.
    assert sorted(seen for key, _new, seen in log.runs if key != BIG) == [4] * len(SMALL_B)
    assert not await redis_client.zcard(KeySpace().memory_dirty)


async def test_a_slice_left_undone_keeps_the_conversation_dirty_with_its_watermark(
        redis_client):
    store, recorder = RedisStore(redis_client), Recorder(redis_client, consumer_prefix="t")
    await record(store, BIG, 250)
    await recorder.process_available()
    log = Log()
    worker = MemoryWorker(redis_client, [log], slice_messages=100, batch=1)

    assert await worker.process_available(limit=1) == 1
    assert log.runs == [(BIG, 100, 100)]
    assert await redis_client.zscore(KeySpace().memory_dirty, encode_key(BIG)) is not None
    processed = MemoryKeySpace().conversation(BIG).processed
    assert (await redis_client.get(processed)).startswith("100:")
    # A worker started afresh (another process) goes on from the watermark.
    again = MemoryWorker(redis_client, [log], slice_messages=100)
    assert await again.process_available() == 2
    assert log.runs[1:] == [(BIG, 100, 200), (BIG, 50, 250)]
    assert not await redis_client.zcard(KeySpace().memory_dirty)


async def test_a_tenants_backlog_of_a_hundred_does_not_keep_another_tenant_waiting(
        redis_client):
    dirty = KeySpace().memory_dirty
    backlog = [ConversationKey("tenant-a", f"u{i}", "c") for i in range(100)]
    late = ConversationKey("tenant-b", "bea", "c")
    store, recorder = RedisStore(redis_client), Recorder(redis_client, consumer_prefix="t")
    for key in [*backlog, late]:
        await record(store, key, 2)
    await recorder.process_available()
    # Tenant A's hundred were all marked before tenant B's one.
    marks = dict(await redis_client.zrange(dirty, 0, -1, withscores=True))
    assert max(marks[encode_key(k)] for k in backlog) <= marks[encode_key(late)]
    log = Log()
    worker = MemoryWorker(redis_client, [log])

    assert await worker.process_available() == 101
    assert [key for key, _, _ in log.runs][:2] == [backlog[0], late]


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


async def test_the_oldest_wait_is_in_the_metrics_and_grows_until_a_worker_takes_it(
        redis_client):
    waiting = ConversationKey("tenant-a", "ann", "locked")
    await redis_client.zadd(KeySpace().memory_dirty, {encode_key(waiting): 900.0})
    # Another worker holds it: this one leaves it waiting, and says since when.
    await redis_client.set(MemoryKeySpace().conversation(waiting).lock, "other", px=60_000)
    worker = MemoryWorker(redis_client, [Log()], clock=Clock(1000.0),
                          jobs=JobMetrics(redis_client))
    assert await worker.process_available() == 0

    scrape = Clock(1000.0)
    stored = StoredJobMetrics(clock=scrape)
    registry = CollectorRegistry()
    registry.register(stored)

    async def exposed() -> float:
        async with redis_client.pipeline(transaction=False) as pipe:
            stored.queue_reads(pipe, "gw")
            stored.read(await pipe.execute())
        return _gauge(generate_latest(registry).decode(), "gateway_memory_oldest_wait_seconds")

    assert await exposed() == 100.0
    scrape.now = 1030.0  # no worker came meanwhile: the wait grows
    assert await exposed() == 130.0

    await redis_client.delete(MemoryKeySpace().conversation(waiting).lock)
    assert await worker.process_available() == 1
    assert await exposed() == 0.0  # nothing waits


def _gauge(text: str, name: str) -> float:
    values: list[Any] = [line.split()[-1] for line in text.splitlines()
                         if line.startswith(name + " ")]
    assert len(values) == 1, text
    return float(values[0])


class Held:
    """A step that holds the run of one conversation (a slow LLM call) until released, and
    notes every other conversation it sees."""

    name = "held"

    def __init__(self, key: ConversationKey):
        self.key = key
        self.release = asyncio.Event()
        self.entered = asyncio.Event()
        self.others = asyncio.Event()

    async def process(self, update: MemoryUpdate) -> None:
        if update.key == self.key:
            self.entered.set()
            await self.release.wait()
        else:
            self.others.set()


async def test_with_two_at_once_a_run_waiting_on_a_slow_step_does_not_hold_the_others(
        redis_client):
    slow, other = BIG, SMALL_B[0]
    store, recorder = RedisStore(redis_client), Recorder(redis_client, consumer_prefix="t")
    await record(store, slow, 4)
    await record(store, other, 4)
    await recorder.process_available()
    held = Held(slow)
    worker = MemoryWorker(redis_client, [held], concurrency=2, poll_seconds=0.01)
    await worker.start()
    try:
        await asyncio.wait_for(held.entered.wait(), 30)
        # The other conversation is processed while the slow run still waits (with one at
        # a time this wait never ends: the slow run is released only below).
        await asyncio.wait_for(held.others.wait(), 30)
    finally:
        held.release.set()
        await worker.stop()
    assert worker.processed == 2
