"""What of a stored message memory may keep (gateway/core/memory/content.py): one-shot
placeholders are never content, so the turn index never holds one. The memory worker and recall
end to end: tests/integration/test_tool_output_memory.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.memory.content import has_content, is_indexed_placeholder, is_tool_result
from gateway.core.messages import Message, chain
from gateway.core.one_shot import is_placeholder, placeholder
from gateway.memory.jobs.importance_pins import rule_pin
from gateway.memory.jobs.turn_index import in_context, turn_entries

CALLS = Message.of("assistant", None, tool_calls=[
    {"id": "call_1", "type": "function", "function": {"name": "run", "arguments": "{}"}}])


@given(role=st.sampled_from(["tool", "user", "assistant"]), text=st.text(min_size=1))
def test_every_placeholder_is_recognised(role, text):
    kept = placeholder(Message.of(role, text))
    assert is_placeholder(kept.text)
    assert is_indexed_placeholder(kept.text)
    assert is_indexed_placeholder(f"[8 May 2023] {kept.text}")  # as a dated index entry
    assert not has_content(kept)


@pytest.mark.parametrize("text", [
    "",
    "[one-shot tool result, 12 chars, not stored] and what the user added",
    "The log said [one-shot tool result, 12 chars, not stored]",
    "[one-shot tool result, 1,2 chars, not stored]",
    "[one-shot tool result, 12,345 characters, not stored]",
    "[one-shot document, 12 chars, not stored]",
    "I typed [one-shot message] myself.",
])
def test_only_a_whole_placeholder_is_one(text):
    assert not is_placeholder(text)
    assert not is_indexed_placeholder(text)


@pytest.mark.parametrize("message, content, tool", [
    (Message.of("user", "Find the flaky test."), True, False),
    (Message.of("assistant", "It depends on a seed."), True, False),
    (Message.of("tool", "1 failed", tool_call_id="call_1"), True, True),
    (Message.of("function", "1 failed", name="run"), True, True),
    (CALLS, False, False),  # a tool-call-only step says nothing
    (Message.of("user", "   "), False, False),
    (Message.of("system", "Be brief."), False, False),  # the client resends its own
    (placeholder(Message.of("tool", "x" * 9000, tool_call_id="call_1")), False, True),
    (placeholder(Message.of("user", "a pasted document")), False, False),
])
def test_what_memory_may_keep_of_a_message(message, content, tool):
    assert has_content(message) is content
    assert is_tool_result(message) is tool


def test_placeholders_are_never_indexed_and_the_next_turn_follows_the_one_before_them():
    transcript = chain(None, [
        Message.of("user", "Find the flaky test in billing."), CALLS,
        placeholder(Message.of("tool", "x" * 9000, tool_call_id="call_1")),
        Message.of("user", "Remember that my order number is 88120931."),
        placeholder(Message.of("user", "a pasted document, marked one-shot")),
        Message.of("assistant", "It depends on a random seed.")])
    entries = turn_entries(transcript)
    assert [e.position for e in entries] == [0, 3, 5]
    assert not [e for e in entries if "one-shot" in e.text or "one-shot" in e.embed_text]
    # Embedded after the turn before the placeholder, linked to it.
    assert entries[1].previous == transcript[0].id
    assert entries[1].embed_text == in_context(transcript[0].message.text,
                                               transcript[3].message.text)
    assert entries[2].previous == transcript[3].id
    # Resumed past a placeholder, the same entries.
    assert turn_entries(transcript, 4) == entries[2:]


@given(st.lists(st.tuples(st.sampled_from(["user", "assistant", "tool"]),
                          st.text(min_size=1, max_size=40), st.booleans()), max_size=12))
def test_no_transcript_indexes_a_placeholder(items):
    messages = [placeholder(Message.of(role, text)) if one_shot else Message.of(role, text)
                for role, text, one_shot in items]
    transcript = chain(None, messages)
    entries = turn_entries(transcript)
    assert {e.id for e in entries} == {m.id for m in transcript if has_content(m.message)}
    assert not [e for e in entries if is_indexed_placeholder(e.text)]


def test_the_importance_rule_never_pins_a_placeholder():
    said = chain(None, [Message.of("user", "Remember that my order number is 88120931."),
                        placeholder(Message.of("user", "Remember that the code is HT-2023-118."))])
    assert rule_pin(said[0]) is not None
    assert rule_pin(said[1]) is None
