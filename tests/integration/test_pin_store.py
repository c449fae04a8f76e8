"""The pin store against a real server: who may override whom, the limits, bad entries."""

from __future__ import annotations

import pytest

from gateway.core.ids import ConversationKey
from gateway.core.context.blocks import PinnedMessage
from gateway.core.messages import Message
from gateway.memory.records.pin_store import MAX_PINS, MAX_RULE_PINS, PinLimitReached, PinStore

KEY = ConversationKey("acme", "alice", "c1")


def pin(id_: str, source: str = "client", at: float = 1.0) -> PinnedMessage:
    return PinnedMessage(id_, Message.of("user", f"text of {id_}"), source, at)  # type: ignore


async def test_a_rule_never_overrides_a_client_pin_and_a_client_pin_takes_over_a_rule_pin(
        store_client):
    store = PinStore(store_client)
    await store.pin(KEY, (pin("a", at=1.0),))
    assert await store.pin_by_rule(KEY, (pin("a", "rule", 5.0), pin("b", "rule", 2.0))) == 1
    assert [(p.id, p.source) for p in await store.list(KEY)] == [("a", "client"), ("b", "rule")]
    taken = await store.pin(KEY, (pin("b", "api", 9.0),))
    assert (taken[0].source, taken[0].pinned_at) == ("api", 2.0)  # keeps its place
    again = await store.pin(KEY, (pin("a", at=7.0),))
    assert again[0].pinned_at == 1.0  # idempotent
    assert await store.unpin(KEY, "a") and not await store.unpin(KEY, "a")
    assert [p.id for p in await store.list(KEY)] == ["b"]


async def test_the_rule_pins_at_most_its_limit_and_nobody_passes_the_total(store_client):
    store = PinStore(store_client)
    rule = tuple(pin(f"r{i}", "rule", float(i)) for i in range(MAX_RULE_PINS + 5))
    assert await store.pin_by_rule(KEY, rule) == MAX_RULE_PINS
    await store.pin(KEY, tuple(pin(f"c{i}") for i in range(MAX_PINS - MAX_RULE_PINS)))
    with pytest.raises(PinLimitReached):
        await store.pin(KEY, (pin("one-more"),))
    await store.pin(KEY, (pin("c0"),))  # already pinned: no new pin, no error
    assert len(await store.list(KEY)) == MAX_PINS


async def test_an_undecodable_entry_is_skipped_not_fatal(store_client):
    store = PinStore(store_client)
    await store_client.hset(store.key(KEY), mapping={"bad": "{not json", "worse": '{"id":1}'})
    await store.pin(KEY, (pin("good"),))
    assert [p.id for p in await store.list(KEY)] == ["good"]
