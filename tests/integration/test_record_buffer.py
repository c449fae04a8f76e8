"""The record buffer against a real store: a reply lost mid-command never makes a turn twice.

The failure is injected at the edge the buffer sees (`TurnSink`): the real `RedisStore` applies
the command, then the caller gets a connection error instead of the reply — what a Redis
stopped between executing a script and answering it looks like.
"""

from __future__ import annotations

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.core.ids import ConversationKey
from gateway.core.messages import Message, StoredMessage
from gateway.core.transcript import TurnRecord
from gateway.pipeline.record_buffer import BufferedTurn, RecordBuffer
from gateway.store import RedisStore

KEY = ConversationKey("acme", "alice", "buffered")


class ReplyLostOnce:
    """The real store, whose first `record` reply is lost after the store executed it."""

    def __init__(self, store: RedisStore):
        self.store = store
        self.records = 0

    async def load(self, key: ConversationKey) -> tuple[StoredMessage, ...]:
        return await self.store.load(key)

    async def record(self, key: ConversationKey, record: TurnRecord) -> object:
        self.records += 1
        entry = await self.store.record(key, record)
        if self.records == 1:
            raise RedisConnectionError("Connection closed by server.")
        return entry


@pytest.fixture
def store(store_client) -> RedisStore:
    return RedisStore(store_client)


@pytest.mark.parametrize("reconciled", [True, False], ids=["record", "incoming"])
async def test_a_turn_whose_enqueue_reply_was_lost_is_stored_once(store, store_client,
                                                                  reconciled):
    question, answer = Message.of("user", "my IBAN changed"), Message.of("assistant", "noted")
    if reconciled:
        turn = BufferedTurn(KEY, "req-1", record=TurnRecord(
            "append", None, (question, answer), created_at=5.0, request_id="req-1"))
    else:  # the request could not read the store: reconciled when flushed, then retried
        turn = BufferedTurn(KEY, "req-1", incoming=(question,), reply=(answer,), created_at=5.0)
    sink = ReplyLostOnce(store)
    buffer = RecordBuffer(sink, capacity=4, retry_initial_seconds=0.01)
    buffer.add(turn)
    assert await buffer.drain(timeout=5) == []

    assert sink.records == 2  # the retry happened
    assert (buffer.flushed, buffer.dropped) == (1, 0)
    assert await store_client.xlen(store.keys.records) == 1
    assert [m.message.text for m in await store.load(KEY)] == ["my IBAN changed", "noted"]
