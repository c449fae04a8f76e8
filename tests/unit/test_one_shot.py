"""One-shot context, the pure part: which messages are one-shot, their placeholders, and that a
stateless client resending one reconciles with the stored placeholder (gateway/core/one_shot.py).
The gateway end to end, with a store-wide scan: tests/integration/test_one_shot_http.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.pipeline.chat_request import parse_chat_request
from gateway.config import RequestLimitsConfig, parse_config
from gateway.core.messages import Message, chain
from gateway.core.one_shot import MARKER, OneShotPolicy, is_one_shot, placeholder, restore, \
    withhold
from gateway.core.transcript import apply_turn, reconcile
from gateway.errors import BadRequest, ConfigError

POLICY = OneShotPolicy(tool_chars=10)


def tool(content, call_id="call_1"):
    return Message.of("tool", content, tool_call_id=call_id)


def calls(call_id="call_1"):
    return Message.of("assistant", None, tool_calls=[
        {"id": call_id, "type": "function", "function": {"name": "search", "arguments": "{}"}}])


def u(text):
    return Message.of("user", text)


def a(text):
    return Message.of("assistant", text)


@pytest.mark.parametrize("message, marked, policy, expected", [
    (tool("x" * 11), False, POLICY, True),                 # above the threshold
    (tool("x" * 10), False, POLICY, False),                # at it: kept
    (tool([{"type": "text", "text": "x" * 11}]), False, POLICY, True),  # content parts count
    (tool("x" * 11), False, OneShotPolicy(None), False),   # size rule off
    (tool("x"), True, OneShotPolicy(None), True),          # marked: whatever its size
    (u("x" * 50), False, POLICY, False),                   # the size rule is for tool results
    (u("doc"), True, POLICY, True),
    (a("quote"), True, POLICY, True),
    (Message.of("system", "x" * 50), True, POLICY, False),  # instructions are never stored
    (calls(), True, POLICY, False),                        # no content: nothing to withhold
])
def test_which_messages_are_one_shot(message, marked, policy, expected):
    assert is_one_shot(message, marked, policy) is expected


@pytest.mark.parametrize("message, content", [
    (tool("x" * 12345), "[one-shot tool result, 12,345 chars, not stored]"),
    (tool([{"type": "text", "text": "ab"}, {"type": "text", "text": "c"}]),
     "[one-shot tool result, 4 chars, not stored]"),  # the parts' text joined by a newline
    (u("a document"), "[one-shot message, 10 chars, not stored]"),
])
def test_placeholder_keeps_every_field_but_the_content(message, content):
    kept = placeholder(message)
    assert kept.role == message.role and kept.extra == message.extra
    assert kept.content == content
    assert placeholder(message) == kept  # a pure function of the message: equal on a resend


def test_withhold_replaces_only_one_shot_messages_and_mutates_nothing():
    messages = (Message.of("system", "be brief"), u("find it"), calls(), tool("y" * 20),
                u("a short note"))
    before = tuple(messages)
    result = withhold(messages, frozenset({4}), POLICY)
    assert result.count == 2
    assert result.kept[:3] == messages[:3]
    assert result.kept[3] == placeholder(messages[3]) and result.kept[3].get("tool_call_id")
    assert result.kept[4] == placeholder(messages[4])
    assert messages == before


def test_withhold_hands_back_the_same_messages_when_nothing_is_one_shot():
    messages = (u("hi"), calls(), tool("short"))
    assert withhold(messages, frozenset(), POLICY).kept == messages
    assert withhold(messages, frozenset(), POLICY).count == 0


def test_a_resent_one_shot_result_reconciles_with_its_stored_placeholder():
    """Turn 1 stores the placeholder; a stateless client resending the full result next turn
    matches it (no fork, nothing stored twice) and the model still gets the full result."""
    big = tool("the full page " * 5)
    turn1 = (u("find it"), calls(), big)
    kept1 = withhold(turn1, frozenset(), POLICY).kept
    stored = apply_turn((), reconcile(kept1, ()).record([a("found")])).applied_to(())
    assert stored[2].message == placeholder(big)

    turn2 = turn1 + (a("found"), u("thanks"))
    kept2 = withhold(turn2, frozenset(), POLICY).kept
    rec = reconcile(kept2, stored)
    assert rec.kind == "stateless" and rec.new == (u("thanks"),)
    assert restore(rec.conversation, turn2) == turn2  # forwarded: the client's full result
    assert apply_turn(stored, rec.record([a("welcome")])).keep == len(stored)

    # A stateful client that does not resend it gets the stored placeholder.
    rec = reconcile((u("and then?"),), stored)
    assert restore(rec.conversation, (u("and then?"),))[2] == placeholder(big)


def test_restore_replaces_the_tail_the_client_sent():
    stored = chain(None, (u("a"), a("b")))
    rec = reconcile((a("b"), u("c")), stored)  # a window overlapping the stored tail
    assert restore(rec.conversation, (a("b"), u("c"))) == (u("a"), a("b"), u("c"))
    with pytest.raises(ValueError):
        restore((u("c"),), (u("a"), u("c")))


def test_the_marker_is_consumed_at_parsing_and_never_forwarded():
    chat = parse_chat_request({"model": "m", "messages": [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "doc", MARKER: True},
        {"role": "user", "content": "q", MARKER: False}]}, RequestLimitsConfig())
    assert chat.one_shot == frozenset({1})
    assert all(MARKER not in m.to_openai() for m in chat.messages)


def test_a_marker_that_is_not_a_boolean_is_a_400_naming_it():
    with pytest.raises(BadRequest) as caught:
        parse_chat_request({"model": "m", "messages": [
            {"role": "user", "content": "doc", MARKER: "yes"}]}, RequestLimitsConfig())
    assert caught.value.status == 400 and caught.value.param == f"messages[0].{MARKER}"


def _tenant(context):
    return {"tenants": {"acme": {"api_keys": [{"sha256": "0" * 64}],
                                 "models": {"m": {"model": "fake/echo"}}, "context": context}}}


def test_the_threshold_is_configured_per_tenant_and_can_be_switched_off():
    assert parse_config(_tenant({})).tenants["acme"].context.one_shot() == OneShotPolicy(8000)
    off = parse_config(_tenant({"one_shot_tool_chars": None}))
    assert off.tenants["acme"].context.one_shot() == OneShotPolicy(None)
    with pytest.raises(ConfigError, match="tenants.acme.context.one_shot_tool_chars"):
        parse_config(_tenant({"one_shot_tool_chars": 0}))


_texts = st.sampled_from(["a", "b", "c"])
_messages = st.lists(st.builds(lambda role, text: Message.of(role, text),
                               st.sampled_from(["user", "assistant", "tool"]), _texts),
                     max_size=6)


@given(stored=_messages, incoming=_messages.filter(bool))
def test_the_reconciled_conversation_always_ends_with_the_clients_messages(stored, incoming):
    """What `restore` relies on: whatever the store holds, the conversation reconciled from the
    kept form ends with the client's messages, so they can be swapped for the forwarded form."""
    rec = reconcile(tuple(incoming), chain(None, stored))
    tail = rec.conversation[len(rec.conversation) - len(incoming):]
    assert [m.key() for m in tail] == [m.key() for m in incoming]
    assert restore(rec.conversation, tuple(incoming))[-len(incoming):] == tuple(incoming)
