"""RedisStore, key names and the codec, against a real server (see tests/support/redis.py)."""

from __future__ import annotations

import itertools
import time

import pytest
import redis.asyncio

from gateway.core.ids import ConversationKey
from gateway.core.messages import Message, chain
from gateway.core.transcript import TurnRecord
from gateway.store import KeySpace, RedisStore, connect
from gateway.store.codec import (CodecError, decode_branch, decode_record, decode_stored,
                                 encode_branch, encode_record, encode_stored)

KEY = ConversationKey("acme", "alice", "conv-1")
TOOL_CALL = {"id": "call_1", "type": "function",
             "function": {"name": "weather", "arguments": "{\"city\": \"北京\"}"}}


def user(text: str) -> Message:
    return Message.of("user", text)


def assistant(text: str) -> Message:
    return Message.of("assistant", text)


def turn(*messages: Message, parent: str | None = None, mode: str = "after") -> TurnRecord:
    return TurnRecord(mode=mode, parent_id=parent, messages=messages, created_at=1.5)


@pytest.fixture
def store(store_client) -> RedisStore:
    return RedisStore(store_client)


# -- codec -------------------------------------------------------------------------------------

def test_codec_round_trips_messages_with_tool_calls_parts_and_flags():
    messages = (Message.of("user", [{"type": "text", "text": "hi"}], name="al"),
                Message.of("assistant", None, tool_calls=[TOOL_CALL]),
                Message.of("tool", "sunny", tool_call_id="call_1"))
    stored = chain("p0", messages, created_at=12.25)
    for m in stored:
        assert decode_stored(encode_stored(m)) == m
    record = TurnRecord("append", None, messages, 3.0, "req-1", incomplete_reply=True)
    assert decode_record(encode_record(record)) == record
    branch = decode_branch(encode_branch(9.5, stored))
    assert (branch.archived_at, branch.messages) == (9.5, stored)
    # The decoded messages recompute the stored chained ids.
    assert [m.id for m in chain("p0", [decode_stored(encode_stored(s)).message
                                       for s in stored])] == [s.id for s in stored]


@pytest.mark.parametrize("text", ["", "not json", "[]", '{"mode": "sideways"}',
                                  '{"mode": "after", "parent_id": null, "messages": [{}]}'])
def test_codec_rejects_malformed_records(text):
    with pytest.raises(CodecError):
        decode_record(text)


# -- keys --------------------------------------------------------------------------------------

def test_conversation_keys_never_collide_across_tenant_user_conversation_splits():
    ids = ["a", "b", "a:b", "b:c", "1:a", "a:1", "c", "2:a:b"]
    keys = KeySpace()
    seen: dict[str, ConversationKey] = {}
    for tenant, usr, conv in itertools.product(ids, repeat=3):
        ck = ConversationKey(tenant, usr, conv)
        for name in keys.conversation(ck).all():
            assert name.startswith("gw:")
            assert seen.setdefault(name, ck) == ck, f"{name} shared by {ck} and {seen[name]}"
    assert len({keys.records, keys.dead, keys.dead_count}) == 3


# -- store ---------------------------------------------------------------------------------------

async def test_record_enqueues_one_stream_entry_and_returns_its_id(store, store_client):
    entry_id = await store.record(KEY, turn(user("hi"), assistant("hello")))
    entries = await store_client.xrange("gw:records")
    assert [e[0] for e in entries] == [entry_id]
    fields = entries[0][1]
    assert (fields["tenant"], fields["user"], fields["conversation"], fields["seq"]) == \
        ("acme", "alice", "conv-1", "1")
    assert decode_record(fields["payload"]) == turn(user("hi"), assistant("hello"))
    assert await store.pending_count(KEY) == 1
    assert await store.applied_seq(KEY) == 0


async def test_a_retried_record_is_enqueued_once_and_returns_the_first_entry_id(store,
                                                                                  store_client):
    # The store applied the first call but its reply was lost (failed mid-command): the
    # caller retries the very same record, which must not become a second turn.
    record = TurnRecord("append", None, (user("hi"), assistant("hello")), 7.25, "req-9")
    first = await store.record(KEY, record)
    assert await store.record(KEY, record) == first
    assert [e[0] for e in await store_client.xrange("gw:records")] == [first]
    assert await store.pending_count(KEY) == 1
    # Another turn, even with the same messages, is a turn of its own; so is a repeat after it.
    again = TurnRecord("append", None, record.messages, 8.5, "req-10")
    second = await store.record(KEY, again)
    third = await store.record(KEY, record)
    assert len({first, second, third}) == 3
    assert [m.message.text for m in await store.load(KEY)] == ["hi", "hello"] * 3
    # Per conversation: the same payload in another conversation is enqueued too.
    other = ConversationKey("acme", "alice", "conv-2")
    assert await store.record(other, record) not in {first, second, third}


async def test_load_sees_pending_turns_in_seq_order_before_the_recorder_ran(store):
    first = turn(user("one"), assistant("1"))
    await store.record(KEY, first)
    await store.record(KEY, turn(user("two"), assistant("2"), mode="append"))
    await store.record(KEY, turn(user("three"), mode="append"))
    loaded = await store.load(KEY)
    assert [m.message.text for m in loaded] == ["one", "1", "two", "2", "three"]
    # The ids are the chained ids the recorder will store.
    assert loaded == chain(None, [m.message for m in loaded], created_at=1.5)


async def test_load_of_a_resent_history_shows_each_message_once(store):
    first = chain(None, [user("one"), assistant("1")], created_at=1.5)
    await store.record(KEY, turn(user("one"), assistant("1")))
    # A stateless client resends everything; the reconciliation sends the rest after parent.
    await store.record(KEY, turn(user("two"), assistant("2"), parent=first[-1].id))
    await store.record(KEY, turn(user("two"), assistant("2"), parent=first[-1].id))
    assert [m.message.text for m in await store.load(KEY)] == ["one", "1", "two", "2"]


async def test_an_unknown_conversation_loads_empty(store):
    assert await store.load(KEY) == ()
    assert await store.branches(KEY) == ()


async def test_pending_turns_of_other_users_and_tenants_never_show(store):
    await store.record(KEY, turn(user("alice's secret")))
    for other in (ConversationKey("acme", "bob", "conv-1"),
                  ConversationKey("other", "alice", "conv-1")):
        assert await store.load(other) == ()


async def test_an_undecodable_pending_turn_is_skipped_by_load(store, store_client):
    ck = store.keys.conversation(KEY)
    await store_client.hset(ck.pending, "1", "garbage")
    await store_client.set(ck.seq, 1)
    await store.record(KEY, turn(user("fine")))
    assert [m.message.text for m in await store.load(KEY)] == ["fine"]


async def test_a_pending_turn_is_decoded_once_while_it_waits(store, store_client):
    # No recorder runs: every turn stays pending, and each load shows them all.
    texts = [f"turn {i}" for i in range(3)]
    for text in texts:
        await store.record(KEY, turn(user(text), mode="append"))
    for _ in range(3):
        assert [m.message.text for m in await store.load(KEY)] == texts
    assert store.pending.decoded == 3
    await store.record(KEY, turn(user("turn 3"), mode="append"))
    loaded = await store.load(KEY)
    assert store.pending.decoded == 4
    # The same as a store that never loaded it.
    assert loaded == await RedisStore(store_client).load(KEY)


async def test_a_seq_used_again_after_a_delete_shows_the_new_turn(store):
    await store.record(KEY, turn(user("before the delete")))
    assert [m.message.text for m in await store.load(KEY)] == ["before the delete"]
    await store.delete(KEY)
    # Created after the delete (its tombstone drops turns created before it): seq 1 again.
    await store.record(KEY, TurnRecord("after", None, (user("after the delete"),),
                                       created_at=time.time() + 60))
    assert [m.message.text for m in await store.load(KEY)] == ["after the delete"]


async def test_ping_succeeds_on_a_live_server_and_raises_on_a_dead_one(store, tmp_path):
    await store.ping()
    dead = connect(f"unix://{tmp_path}/nothing.sock")
    try:
        with pytest.raises(redis.exceptions.ConnectionError):
            await RedisStore(dead).ping()
    finally:
        await dead.aclose()


async def test_a_client_returning_bytes_is_refused(store_url):
    raw = redis.asyncio.Redis.from_url(store_url)
    try:
        with pytest.raises(ValueError, match="decode_responses"):
            RedisStore(raw)
    finally:
        await raw.aclose()
