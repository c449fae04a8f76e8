"""The memory worker: durable, coalescing, exclusive, bounded processing of changed transcripts."""

from __future__ import annotations

import pytest

from gateway.core.ids import ConversationKey
from gateway.core.messages import Message
from gateway.core.transcript import TurnRecord
from gateway.memory.records.keys import MemoryKeySpace
from gateway.memory.records.settings_store import SettingsStore
from gateway.memory.jobs.worker import MemoryUpdate, MemoryWorker
from gateway.store import RedisStore
from gateway.store.recording import Recorder
from gateway.store.codec import encode_key

KEY = ConversationKey("acme", "alice", "c1")


class Recording:
    """A processor that remembers what it was given, and fails while told to."""

    name = "recording"

    def __init__(self, failures: int = 0):
        self.updates: list[MemoryUpdate] = []
        self.failures = failures

    async def process(self, update: MemoryUpdate) -> None:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("processor failed")
        self.updates.append(update)


class Clock:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


async def record(store, recorder, *texts, key=KEY):
    messages = tuple(Message.of("user" if i % 2 == 0 else "assistant", t)
                     for i, t in enumerate(texts))
    await store.record(key, TurnRecord("append", None, messages))
    await recorder.process_available()


@pytest.fixture
def parts(redis_client):
    store = RedisStore(redis_client)
    recorder = Recorder(redis_client, consumer_prefix="test")
    return store, recorder


async def test_new_turns_are_processed_once_with_what_is_new(redis_client, parts):
    store, recorder = parts
    processor = Recording()
    worker = MemoryWorker(redis_client, [processor])
    await record(store, recorder, "q1", "a1")
    assert await worker.process_available() == 1
    await record(store, recorder, "q2", "a2")
    assert await worker.process_available() == 1
    assert await worker.process_available() == 0  # nothing dirty any more
    first, second = processor.updates
    assert [m.message.text for m in first.new] == ["q1", "a1"]
    assert [m.message.text for m in second.new] == ["q2", "a2"]
    assert [m.message.text for m in second.transcript] == ["q1", "a1", "q2", "a2"]


async def test_turns_recorded_while_waiting_are_coalesced(redis_client, parts):
    store, recorder = parts
    processor = Recording()
    worker = MemoryWorker(redis_client, [processor])
    await record(store, recorder, "q1", "a1")
    await record(store, recorder, "q2", "a2")
    assert await worker.process_available() == 1
    assert [m.message.text for m in processor.updates[0].new] == ["q1", "a1", "q2", "a2"]


async def test_a_failing_processor_is_retried_after_backoff_then_succeeds(redis_client, parts):
    store, recorder = parts
    clock = Clock()
    processor = Recording(failures=1)
    worker = MemoryWorker(redis_client, [processor], clock=clock, backoff_seconds=10)
    # The recorder stamps the change with real time; let the worker's clock be later.
    await record(store, recorder, "q1", "a1")
    clock.now = 9e9
    await worker.process_available()
    assert processor.updates == []
    assert await worker.process_available() == 0  # not due before the backoff
    clock.now += 11
    await worker.process_available()
    assert [m.message.text for m in processor.updates[0].new] == ["q1", "a1"]


async def test_a_conversation_failing_every_time_is_dead_lettered_and_counted(redis_client,
                                                                              parts):
    store, recorder = parts
    clock = Clock(9e9)
    worker = MemoryWorker(redis_client, [Recording(failures=99)], clock=clock, max_attempts=3,
                          backoff_seconds=1)
    await record(store, recorder, "q1", "a1")
    for _ in range(3):
        await worker.process_available()
        clock.now += 100
    assert worker.dead_lettered == 1
    assert await redis_client.zcard(MemoryKeySpace().store.memory_dirty) == 0
    assert await redis_client.get("gw:memory:dead:count") == "1"
    assert "processor failed" in await redis_client.hget("gw:memory:dead", encode_key(KEY))


async def test_a_locked_conversation_is_left_for_its_holder(redis_client, parts):
    store, recorder = parts
    processor = Recording()
    worker = MemoryWorker(redis_client, [processor])
    await record(store, recorder, "q1", "a1")
    await redis_client.set(MemoryKeySpace().conversation(KEY).lock, "someone-else")
    assert await worker.process_available() == 0
    assert processor.updates == []
    assert await redis_client.zcard(MemoryKeySpace().store.memory_dirty) == 1


async def test_a_conversation_marked_again_during_processing_stays_dirty(redis_client, parts):
    store, recorder = parts

    class RecordsMeanwhile(Recording):
        async def process(self, update):
            await super().process(update)
            if len(self.updates) == 1:
                await record(store, recorder, "q2", "a2")

    processor = RecordsMeanwhile()
    worker = MemoryWorker(redis_client, [processor])
    await record(store, recorder, "q1", "a1")
    await worker.process_available()
    assert await redis_client.zcard(MemoryKeySpace().store.memory_dirty) == 0
    assert [m.message.text for m in processor.updates[-1].new] == ["q2", "a2"]


async def test_memory_switched_off_processes_nothing(redis_client, parts):
    store, recorder = parts
    await SettingsStore(redis_client).set("acme", "alice", memory=False)
    processor = Recording()
    worker = MemoryWorker(redis_client, [processor])
    await record(store, recorder, "q1", "a1")
    await worker.process_available()
    assert processor.updates == []
    assert await redis_client.zcard(MemoryKeySpace().store.memory_dirty) == 0


async def test_background_worker_processes_and_drains(redis_client, parts):
    store, recorder = parts
    processor = Recording()
    worker = MemoryWorker(redis_client, [processor], poll_seconds=0.01)
    await worker.start()
    await record(store, recorder, "q1", "a1")
    await worker.drain(timeout=5)
    assert [m.message.text for m in processor.updates[-1].transcript] == ["q1", "a1"]
