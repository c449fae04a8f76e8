"""The recorder against a real server: order, idempotence, forks, crash recovery, poison jobs."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace

import pytest

from gateway.core.ids import ConversationKey
from gateway.core.messages import Message, chain
from gateway.core.transcript import TurnRecord
from gateway.store import RedisStore
from gateway.store.recording import Recorder
from gateway.store.codec import encode_record
from gateway.store.transcript_cache import TranscriptCache

KEY = ConversationKey("acme", "alice", "conv-1")


def user(text: str) -> Message:
    return Message.of("user", text)


def assistant(text: str) -> Message:
    return Message.of("assistant", text)


def after(parent: str | None, *messages: Message) -> TurnRecord:
    return TurnRecord(mode="after", parent_id=parent, messages=messages, created_at=1.0)


def append(*messages: Message) -> TurnRecord:
    return TurnRecord(mode="append", parent_id=None, messages=messages, created_at=1.0)


def texts(messages) -> list[str]:
    return [m.message.text for m in messages]


@pytest.fixture
def store(store_client) -> RedisStore:
    return RedisStore(store_client)


@pytest.fixture
def recorder(store_client) -> Recorder:
    return Recorder(store_client, consumer_prefix="test", backoff_seconds=0.01,
                    block_ms=20, claim_idle_ms=30_000)


async def until(predicate, timeout: float = 10.0) -> None:
    """Poll an async predicate until true; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def _applied(store: RedisStore, seq: int, key: ConversationKey = KEY) -> bool:
    return await store.applied_seq(key) >= seq


async def assert_queue_empty(client) -> None:
    assert await client.xlen("gw:records") == 0
    assert (await client.xpending("gw:records", "recorders"))["pending"] == 0


async def enqueue_raw(client, key: ConversationKey, payload: str) -> str:
    """Enqueue a job the way RedisStore.record does, with a payload of our choosing."""
    ck = RedisStore(client).keys.conversation(key)
    seq = await client.incr(ck.seq)
    await client.hset(ck.pending, str(seq), payload)
    return await client.xadd("gw:records", {"tenant": key.tenant, "user": key.user,
                                            "conversation": key.conversation, "seq": seq,
                                            "payload": payload})


async def test_a_resent_and_a_retried_turn_store_each_message_once(store, recorder,
                                                                   store_client):
    first = chain(None, [user("one"), assistant("1")], created_at=1.0)
    await store.record(KEY, after(None, user("one"), assistant("1")))
    second = after(first[-1].id, user("two"), assistant("2"))
    await store.record(KEY, second)
    # The same job in the stream twice (the store's record dedupes a retry; a raw enqueue
    # does not): applying must be idempotent too.
    await enqueue_raw(store_client, KEY, encode_record(second))
    await store.record(KEY, after(None, user("one"), assistant("1")))  # a prefix resent
    assert await recorder.process_available() == 4

    loaded = await store.load(KEY)
    assert texts(loaded) == ["one", "1", "two", "2"]
    assert loaded == chain(None, [m.message for m in loaded], created_at=1.0)
    assert await store_client.llen(store.keys.conversation(KEY).transcript) == 4
    assert await store.branches(KEY) == ()
    assert await store.applied_seq(KEY) == 4
    assert await store.pending_count(KEY) == 0
    assert recorder.applied == 4
    await assert_queue_empty(store_client)


async def test_a_fork_archives_the_old_branch_and_keeps_it_readable(store, recorder):
    original = chain(None, [user("q"), assistant("a1"), user("more"), assistant("m1")],
                     created_at=1.0)
    await store.record(KEY, after(None, *[m.message for m in original]))
    await recorder.process_available()
    # The client regenerates the first answer: a new branch after the first message.
    await store.record(KEY, after(original[0].id, assistant("a2")))
    await recorder.process_available()

    assert texts(await store.load(KEY)) == ["q", "a2"]
    (branch,) = await store.branches(KEY)
    assert branch.messages == original[1:]
    assert branch.archived_at > 0
    assert (await store.meta(KEY))["message_count"] == "2"


async def test_load_is_the_same_before_and_after_the_recorder_runs(store, recorder):
    base = chain(None, [user("q"), assistant("a1")], created_at=1.0)
    await store.record(KEY, after(None, user("q"), assistant("a1")))
    await store.record(KEY, after(base[0].id, assistant("a2")))  # a fork, still pending
    await store.record(KEY, append(user("next")))
    before = await store.load(KEY)
    await recorder.process_available()
    assert await store.load(KEY) == before
    assert texts(before) == ["q", "a2", "next"]


async def test_meta_names_the_owner_and_counts_messages(store, recorder):
    await store.record(KEY, append(user("hi"), assistant("hello")))
    await recorder.process_available()
    meta = await store.meta(KEY)
    assert (meta["tenant"], meta["user"], meta["conversation"]) == ("acme", "alice", "conv-1")
    assert meta["message_count"] == "2"
    assert float(meta["created_at"]) <= float(meta["updated_at"])


async def test_a_duplicate_delivery_of_an_applied_job_is_acked_and_skipped(store, recorder,
                                                                           store_client):
    await store.record(KEY, append(user("once")))
    ((_, fields),) = await store_client.xrange("gw:records")
    await recorder.process_available()
    await store_client.xadd("gw:records", fields)  # delivered again, e.g. by a replay
    assert await recorder.process_available() == 1
    assert texts(await store.load(KEY)) == ["once"]
    assert recorder.duplicates == 1
    await assert_queue_empty(store_client)


async def test_usage_is_counted_once_with_its_turn_a_duplicate_adds_nothing(store, recorder,
                                                                          store_client):
    from gateway.core.spend import TurnUsage
    from gateway.store.recording.usage import UsageCounters

    usage = TurnUsage(900, 300, 310, 256, 0, 12, spend=1234, whole_cost=5678, usage_known=True)
    record = TurnRecord(mode="append", parent_id=None, messages=(user("counted"),),
                        created_at=1.0, usage=usage)
    await store.record(KEY, record)
    ((_, fields),) = await store_client.xrange("gw:records")
    await recorder.process_available()
    await store_client.xadd("gw:records", fields)  # delivered again
    await recorder.process_available()
    other = ConversationKey("acme", "bob", "conv-1")
    await store.record(other, record)
    await recorder.process_available()
    counters = UsageCounters(store_client, store.keys)
    for totals in (await counters.conversation(KEY), await counters.user("acme", "alice")):
        assert totals.as_json() == {
            "requests": 1, "requests_priced": 1, "requests_unpriced": 0,
            "requests_without_usage": 0,
            "tokens": {"original": 900, "forwarded": 300, "prompt": 310, "cached": 256,
                       "cache_write": 0, "completion": 12},
            "spend": 1234e-9, "whole_history_cost": 5678e-9}
    tenant = (await counters.tenant("acme")).as_json()
    assert tenant["requests"] == 2 and tenant["tokens"]["cached"] == 512
    assert (await counters.tenant("globex")).as_json()["requests"] == 0


async def test_an_entry_left_pending_by_a_vanished_consumer_is_reclaimed(store, store_client):
    crashed = Recorder(store_client, consumer_prefix="crashed", block_ms=10)
    await crashed.ensure_group()
    entry = await store.record(KEY, append(user("survives")))
    # The crashed consumer read the job and died before applying or acking it.
    await store_client.xreadgroup("recorders", "crashed-0", {"gw:records": ">"}, count=10)
    assert (await store_client.xpending("gw:records", "recorders"))["pending"] == 1

    restarted = Recorder(store_client, consumer_prefix="elsewhere", block_ms=10)
    assert await restarted.process_available() == 0  # not idle long enough: its owner may live

    async def idle_for(ms: int) -> None:
        # The idle time is the store's to measure: set it (XCLAIM IDLE, to the same owner).
        await store_client.xclaim("gw:records", "recorders", "crashed-0", 0, [entry],
                                  idle=ms, justid=True)

    await idle_for(restarted.claim_idle_ms - 10_000)
    assert await restarted.process_available() == 0
    await idle_for(restarted.claim_idle_ms + 10_000)
    assert await restarted.process_available() == 1
    assert restarted.reclaimed == 1
    assert texts(await store.load(KEY)) == ["survives"]
    await assert_queue_empty(store_client)


async def test_a_restarted_consumer_re_reads_its_own_pending_entries_first(store, store_client):
    await Recorder(store_client, consumer_prefix="host-7").ensure_group()
    await store.record(KEY, append(user("mine")))
    await store_client.xreadgroup("recorders", "host-7-0", {"gw:records": ">"}, count=10)
    # Same consumer name after a restart, claim_idle_ms far away: no claim is needed.
    again = Recorder(store_client, consumer_prefix="host-7", claim_idle_ms=60_000, block_ms=20)
    await again.start()
    try:
        await until(lambda: _applied(store, 1))
    finally:
        await again.stop()
    assert again.reclaimed == 0
    assert texts(await store.load(KEY)) == ["mine"]


async def test_concurrent_records_on_one_conversation_lose_nothing_and_keep_seq_order(
        store, store_client):
    recorders = [Recorder(store_client, consumer_prefix=name, block_ms=10, claim_idle_ms=5000,
                          batch=4) for name in ("r1", "r2")]
    for r in recorders:
        await r.start()
    try:
        entry_ids = await asyncio.gather(
            *(store.record(KEY, append(user(f"m{i}"))) for i in range(50)))
        await until(lambda: _applied(store, 50))
    finally:
        for r in recorders:
            await r.stop()
    # Stream ids grow with seq (one atomic script), so they give the enqueue order.
    by_seq = [text for _, text in sorted(zip(entry_ids, (f"m{i}" for i in range(50))),
                                         key=lambda pair: tuple(map(int, pair[0].split("-"))))]
    assert texts(await store.load(KEY)) == by_seq
    assert sum(r.applied for r in recorders) == 50
    assert await store.pending_count(KEY) == 0
    await assert_queue_empty(store_client)


async def test_a_poison_job_is_dead_lettered_and_does_not_block_later_jobs(store, recorder,
                                                                           store_client,
                                                                           caplog):
    recorder.max_attempts = 3
    await store.record(KEY, append(user("before")))
    poison_id = await enqueue_raw(store_client, KEY, "{not json")
    await store.record(KEY, append(user("after")))
    with caplog.at_level(logging.WARNING, logger="gateway.recorder"):
        async with asyncio.timeout(10):  # a job retried forever would hang here
            await recorder.process_available()

    assert texts(await store.load(KEY)) == ["before", "after"]
    assert recorder.dead_lettered == 1 and recorder.retried == 2
    assert await store.dead_letter_count() == 1
    ((_, dead),) = await store_client.xrange("gw:records:dead")
    assert dead["entry_id"] == poison_id
    assert dead["attempts"] == "3"
    assert "CodecError" in dead["error"]
    assert dead["payload"] == "{not json" and dead["seq"] == "2"
    assert await store.applied_seq(KEY) == 3
    assert await store.pending_count(KEY) == 0
    failures = [r for r in caplog.records if r.name == "gateway.recorder" and r.exc_info]
    assert len(failures) == 3
    await assert_queue_empty(store_client)


async def test_a_lost_seq_is_skipped_instead_of_blocking_the_conversation(store, recorder,
                                                                          store_client):
    await store.record(KEY, append(user("one")))
    lost = await store.record(KEY, append(user("two")))
    await store.record(KEY, append(user("three")))
    # Lose job 2 entirely: neither pending nor in the stream.
    await store_client.xdel("gw:records", lost)
    await store_client.hdel(store.keys.conversation(KEY).pending, "2")
    assert await recorder.process_available() == 2
    assert texts(await store.load(KEY)) == ["one", "three"]
    assert recorder.skipped == 1
    assert await store.applied_seq(KEY) == 3


async def test_a_pending_turn_whose_stream_entry_vanished_is_enqueued_again(store,
                                                                           store_client):
    now = [0.0]
    recorder = Recorder(store_client, consumer_prefix="t", gap_timeout_ms=1000, block_ms=10,
                        claim_idle_ms=60_000, gap_clock=lambda: now[0])
    vanished = await store.record(KEY, append(user("one")))
    await store.record(KEY, append(user("two")))
    await store_client.xdel("gw:records", vanished)  # still in the pending hash
    assert await recorder.process_available() == 0  # job 2 waits for job 1
    now[0] = 0.999
    assert await recorder.process_available() == 0  # not waited gap_timeout_ms yet
    assert recorder.reenqueued == 0
    now[0] = 1.0
    assert await recorder.process_available() == 2
    assert recorder.reenqueued == 1
    assert texts(await store.load(KEY)) == ["one", "two"]
    await assert_queue_empty(store_client)


async def test_conversations_with_one_id_under_other_users_or_tenants_never_mix(store,
                                                                                recorder):
    owners = [ConversationKey("acme", "alice", "shared"), ConversationKey("acme", "bob", "shared"),
              ConversationKey("other", "alice", "shared"), ConversationKey("acme", "alice:x", "y"),
              ConversationKey("acme", "alice", "x:y")]
    for n, key in enumerate(owners):
        await store.record(key, append(user(f"secret of {n}")))
    await recorder.process_available()
    for n, key in enumerate(owners):
        assert texts(await store.load(key)) == [f"secret of {n}"]
        assert (await store.meta(key))["user"] == key.user


async def test_drain_applies_everything_enqueued_before_it(store, store_client):
    recorder = Recorder(store_client, consumer_prefix="d", workers=2, block_ms=500,
                        claim_idle_ms=5000)
    await recorder.start()
    keys = [ConversationKey("acme", f"user{n}", "c") for n in range(5)]
    for key in keys:
        for i in range(4):
            await store.record(key, append(user(f"{key.user}-{i}")))
    await recorder.drain(timeout=10)
    for key in keys:
        assert texts(await store.load(key)) == [f"{key.user}-{i}" for i in range(4)]
        assert await store.applied_seq(key) == 4
    await assert_queue_empty(store_client)


async def test_background_workers_apply_without_being_asked(store, recorder):
    await recorder.start()
    try:
        await store.record(KEY, append(user("hello")))
        await until(lambda: _applied(store, 1))
    finally:
        await recorder.stop()
    assert texts(await store.load(KEY)) == ["hello"]


async def test_a_deleted_conversation_is_not_brought_back_by_jobs_still_queued(store,
                                                                              recorder):
    await store.record(KEY, append(user("forget me")))
    await store.delete(KEY)
    assert await store.load(KEY) == ()
    await recorder.process_available()
    assert await store.load(KEY) == ()
    # A turn made after the delete (the tombstone drops those made before it: `after` and
    # `append` date theirs at 1.0) starts the conversation again.
    await store.record(KEY, replace(append(user("new start")), created_at=time.time() + 1))
    await recorder.process_available()
    assert texts(await store.load(KEY)) == ["new start"]


async def test_a_worker_recreates_its_group_when_the_stream_is_deleted(store, recorder,
                                                                       store_client):
    await recorder.start()
    try:
        await store.record(KEY, append(user("one")))
        await until(lambda: _applied(store, 1))
        await store_client.delete("gw:records")  # stream and group gone
        await store.record(KEY, append(user("two")))  # XADD makes a stream with no group
        await until(lambda: _applied(store, 2))
    finally:
        await recorder.stop()
    assert texts(await store.load(KEY)) == ["one", "two"]


# -- the transcript cache: every load checks the store; a cached transcript is never stale ---

async def test_a_second_load_of_an_unchanged_transcript_is_served_from_the_cache(store, recorder):
    await store.record(KEY, after(None, user("q"), assistant("a")))
    await recorder.process_available()
    first = await store.load(KEY)
    hits = store.cache.hits
    assert await store.load(KEY) == first
    assert store.cache.hits == hits + 1 and texts(first) == ["q", "a"]


async def test_a_cached_transcript_sees_turns_applied_by_another_process(store_client, recorder):
    reader, writer = RedisStore(store_client), RedisStore(store_client)  # two caches: replicas
    await writer.record(KEY, after(None, user("q"), assistant("a")))
    await recorder.process_available()
    assert texts(await reader.load(KEY)) == ["q", "a"]
    await writer.record(KEY, append(user("more"), assistant("b")))
    await recorder.process_available()
    assert texts(await reader.load(KEY)) == ["q", "a", "more", "b"]
    assert reader.cache.extended == 1  # appended to: only the two new messages were sent
    # A regenerated answer replaces the last message: same length, another last element.
    loaded = await reader.load(KEY)
    await writer.record(KEY, after(loaded[2].id, assistant("b2")))
    await recorder.process_available()
    assert texts(await reader.load(KEY)) == ["q", "a", "more", "b2"]


async def test_a_recorder_and_a_store_sharing_a_cache_decode_each_message_once(store_client):
    shared = TranscriptCache()
    store = RedisStore(store_client, cache=shared)
    recorder = Recorder(store_client, consumer_prefix="test", block_ms=20, transcripts=shared)
    await store.record(KEY, after(None, user("q"), assistant("a")))
    await recorder.process_available()
    assert texts(await store.load(KEY)) == ["q", "a"]
    for turn in range(2):
        await store.record(KEY, append(user(f"more {turn}"), assistant(f"b {turn}")))
        hits, extended, misses = shared.hits, shared.extended, shared.misses
        await recorder.process_available()
        # What the store's load decoded, the recorder finds as it is: nothing decoded again.
        assert (shared.hits, shared.extended, shared.misses) == (hits + 1, extended, misses)
        assert len(await store.load(KEY)) == 4 + 2 * turn
        assert shared.extended == extended + 1  # only the turn just applied was decoded
    assert len(shared) == 1


async def test_a_deleted_conversation_is_never_served_from_the_cache(store, recorder):
    await store.record(KEY, after(None, user("secret"), assistant("a")))
    await recorder.process_available()
    assert texts(await store.load(KEY)) == ["secret", "a"]
    await store.delete(KEY)
    assert store.cache.get(KEY) is None  # its text is not kept in memory either
    assert await store.load(KEY) == ()
    # Recreated with other content of the same length: the new content, not the cached one.
    await store.record(KEY, replace(after(None, user("other"), assistant("b")),
                                    created_at=time.time() + 1))
    await recorder.process_available()
    assert texts(await store.load(KEY)) == ["other", "b"]
