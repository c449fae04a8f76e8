"""Provider prompt-cache hints (gateway/core/context/cache_hints.py), which routes get them
(gateway/upstream/endpoint.py), and the stream usage kept from a client that did not ask for
it (gateway/pipeline/streams.py)."""

from __future__ import annotations

import copy
import json

import pytest

from gateway.core.context.cache_hints import prompt_cache_key, with_cache_hint
from gateway.core.ids import ConversationKey
from gateway.pipeline.streams import ChatEncoder
from gateway.ports import RawChunk
from gateway.upstream.endpoint import cache_hint

KEY = ConversationKey("acme", "alice", "c1")
EPHEMERAL = {"type": "ephemeral"}


def test_prompt_cache_key_is_stable_per_conversation_and_opaque():
    assert prompt_cache_key(KEY) == prompt_cache_key(ConversationKey("acme", "alice", "c1"))
    others = {prompt_cache_key(ConversationKey(*k)) for k in
              [("acme", "alice", "c2"), ("acme", "bob", "c1"), ("globex", "alice", "c1"),
               ("acme", "alice:c", "1"), ("acme:alice", "c", "1")]}
    assert prompt_cache_key(KEY) not in others and len(others) == 5
    assert "alice" not in prompt_cache_key(KEY) and len(prompt_cache_key(KEY)) <= 64


def test_prompt_cache_key_is_added_unless_the_client_set_one():
    body = {"messages": [{"role": "user", "content": "hi"}]}
    before = copy.deepcopy(body)
    assert with_cache_hint(body, "prompt_cache_key", KEY)["prompt_cache_key"] == \
        prompt_cache_key(KEY)
    assert body == before  # never mutated
    assert with_cache_hint({**body, "prompt_cache_key": "mine"}, "prompt_cache_key",
                           KEY)["prompt_cache_key"] == "mine"


def test_the_breakpoint_ends_the_leading_system_messages():
    body = {"messages": [{"role": "system", "content": "Be brief."},
                         {"role": "system", "content": [{"type": "text", "text": "Memory."},
                                                        {"type": "image_url", "image_url": {}}]},
                         {"role": "user", "content": "hi"},
                         {"role": "system", "content": "recalled"}]}
    before = copy.deepcopy(body)
    out = with_cache_hint(body, "cache_control", KEY)["messages"]
    assert body == before
    assert out[0] == body["messages"][0]
    assert out[1]["content"][0] == {"type": "text", "text": "Memory.", "cache_control": EPHEMERAL}
    assert out[1]["content"][1] == {"type": "image_url", "image_url": {}}
    # The recalled block after the history is sent as a user message: Anthropic would hoist
    # a system message above the cached prefix.
    assert out[2:] == [{"role": "user", "content": "hi"}, {"role": "user", "content": "recalled"}]
    one = with_cache_hint({"messages": [{"role": "system", "content": "S"},
                                        {"role": "user", "content": "u"}]}, "cache_control", KEY)
    assert one["messages"][0]["content"] == [{"type": "text", "text": "S",
                                              "cache_control": EPHEMERAL}]


def test_a_second_breakpoint_ends_the_stable_prefix_the_rewrite_names():
    """The stepped window (or the whole history) is the stable prefix: the breakpoint at its
    last message with text lets the next request read it back (a tool call without text is
    passed over)."""
    messages = [{"role": "system", "content": "S"},
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]},
                {"role": "user", "content": "now"}]
    out = with_cache_hint({"messages": messages}, "cache_control", KEY, stable=3)["messages"]
    assert out[0]["content"] == [{"type": "text", "text": "S", "cache_control": EPHEMERAL}]
    assert out[1]["content"] == [{"type": "text", "text": "first", "cache_control": EPHEMERAL}]
    assert out[2:] == messages[2:]
    without_system = with_cache_hint({"messages": messages[1:]}, "cache_control", KEY,
                                     stable=1)["messages"]
    assert without_system[0]["content"][0]["cache_control"] == EPHEMERAL
    assert with_cache_hint({"messages": messages}, "cache_control", KEY, stable=1) == \
        with_cache_hint({"messages": messages}, "cache_control", KEY)


@pytest.mark.parametrize("body", [
    {"messages": [{"role": "user", "content": "no system prompt"}]},
    {"messages": [{"role": "system", "content": ""}, {"role": "user", "content": "u"}]},
])
def test_no_breakpoint_without_a_system_prefix(body):
    assert with_cache_hint(body, "cache_control", KEY) == body


def marks(body: dict) -> int:
    return json.dumps(body).count('"cache_control"')


def test_the_client_s_breakpoints_are_kept_and_the_gateway_adds_its_own_up_to_four():
    mark = {"type": "text", "text": "u", "cache_control": EPHEMERAL}
    body = {"messages": [{"role": "system", "content": "S"},
                         {"role": "user", "content": "first"},
                         {"role": "assistant", "content": "answer"},
                         {"role": "user", "content": [mark]}]}
    out = with_cache_hint(body, "cache_control", KEY, stable=3)
    # the client's mark stays; the stable prefix's end and the system prompt are marked too
    assert out["messages"][3] == body["messages"][3]
    assert out["messages"][2]["content"][0]["cache_control"] == EPHEMERAL
    assert out["messages"][0]["content"][0]["cache_control"] == EPHEMERAL
    assert marks(out) == 3
    # the stable prefix's end first: with room for one more, only it is marked
    two = with_cache_hint(body, "cache_control", KEY, stable=3, marked_elsewhere=2)
    assert marks(two) == 2 and two["messages"][2]["content"][0]["cache_control"] == EPHEMERAL
    # four already (two of them on tool results the chat body does not show): nothing added
    assert with_cache_hint(body, "cache_control", KEY, stable=3, marked_elsewhere=3) == body
    tools = {**body, "tools": [{"name": "t", "cache_control": EPHEMERAL}]}
    assert marks(with_cache_hint(tools, "cache_control", KEY, stable=3,
                                 marked_elsewhere=1)) + 1 == 4


def test_a_place_the_client_marked_is_not_marked_again():
    body = {"messages": [{"role": "system", "content": [
        {"type": "text", "text": "S", "cache_control": EPHEMERAL}]},
        {"role": "user", "content": "now"}]}
    assert with_cache_hint(body, "cache_control", KEY) == body


def test_a_memory_block_after_the_history_is_a_user_message_even_with_the_client_s_marks():
    body = {"messages": [{"role": "system", "content": "S", "cache_control": EPHEMERAL},
                         {"role": "user", "content": "u"},
                         {"role": "system", "content": "recalled"},
                         {"role": "user", "content": "now"}]}
    out = with_cache_hint(body, "cache_control", KEY)
    assert out["messages"][2] == {"role": "user", "content": "recalled"}
    assert out["messages"][:2] == body["messages"][:2] and out["messages"][3:] == body["messages"][3:]
    assert with_cache_hint(body, "prompt_cache_key", KEY)["messages"] == body["messages"]


@pytest.mark.parametrize("model, api_base, params, setting, expected", [
    ("openai/gpt-4o-mini", None, {}, None, "prompt_cache_key"),
    ("gpt-4.1", None, {}, None, "prompt_cache_key"),
    ("openai/gpt-4o", "https://api.openai.com/v1", {}, None, "prompt_cache_key"),
    ("openai/llama3", "http://127.0.0.1:11434/v1", {}, None, None),
    ("openai/llama3", "http://127.0.0.1:11434/v1", {}, True, "prompt_cache_key"),
    ("anthropic/claude-sonnet-4-5", None, {}, None, "cache_control"),
    ("anthropic/claude-sonnet-4-5", None, {}, False, None),
    ("bedrock/anthropic.claude-3-5-sonnet", None, {}, None, None),
    ("bedrock/anthropic.claude-3-5-sonnet", None, {}, True, "cache_control"),
    ("gemini/gemini-2.0-flash", None, {}, None, None),
    ("fake/echo", None, {}, True, None),
    ("openai/gpt-4o", None, {"organization": "o"}, None, None),
])
def test_which_routes_get_hints(model, api_base, params, setting, expected):
    assert cache_hint(model, api_base, params, setting) == expected


def _raw(data: dict, separators=(",", ":")) -> RawChunk:
    return RawChunk(data, json.dumps(data, separators=separators).encode())


CHUNK = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
         "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]}
USAGE = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}


def test_the_usage_the_gateway_asked_for_is_kept_from_the_client():
    encoder = ChatEncoder(strip_usage=True)
    plain = b"data: " + json.dumps(CHUNK, separators=(",", ":")).encode() + b"\n\n"
    assert encoder.chunk(_raw({**CHUNK, "usage": None})) == plain
    assert encoder.chunk(_raw({**CHUNK, "usage": None}, separators=(", ", ": "))) == \
        b"data: " + json.dumps(CHUNK, separators=(", ", ": ")).encode() + b"\n\n"
    assert encoder.chunk(_raw({**CHUNK, "choices": [], "usage": USAGE})) == b""
    assert encoder.chunk({**CHUNK, "choices": [], "usage": USAGE}) == b""  # litellm's dicts
    assert encoder.chunk(_raw(CHUNK)) == plain
    # a text that only looks like the field is the text, untouched
    tricky = {**CHUNK, "choices": [{"index": 0, "delta": {"content": ',"usage":null'}}]}
    assert encoder.chunk(_raw({**tricky, "usage": None})) == _event(tricky)


def test_a_client_that_asked_gets_the_usage_as_it_came():
    encoder = ChatEncoder()
    for data in ({**CHUNK, "usage": None}, {**CHUNK, "choices": [], "usage": USAGE}):
        assert encoder.chunk(_raw(data)) == _event(data)


def _event(data: dict) -> bytes:
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


def test_the_kept_form_has_no_breakpoints_and_one_text_part_as_its_text():
    """What the transcript compares and stores: a client's moving breakpoints are not content
    (Claude Code marks its newest message each turn), and a one-part text list reads as the
    text the Messages door gives an unmarked one."""
    from gateway.core.context.cache_hints import without_cache_marks
    from gateway.core.messages import Message

    plain = (Message.plain("user", "hi"), Message.of("tool", "r", tool_call_id="c"),
             Message.of("user", [{"type": "text", "text": "A"}, {"type": "image_url",
                                                                 "image_url": {"url": "u"}}]))
    assert without_cache_marks(plain) is plain  # nothing to change: the same tuple
    marked = (Message.of("user", [{"type": "text", "text": "A", "cache_control": EPHEMERAL}]),
              Message.of("user", [{"type": "text", "text": "A"},
                                  {"type": "text", "text": "B", "cache_control": EPHEMERAL}]),
              Message.of("system", "s", cache_control=EPHEMERAL),
              Message.of("user", [{"type": "text", "text": "A"}]))
    assert [m.to_openai() for m in without_cache_marks(marked)] == [
        {"role": "user", "content": "A"},
        {"role": "user", "content": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}]},
        {"role": "system", "content": "s"},
        {"role": "user", "content": "A"}]
    # The same message marked on one turn and not on the next compares equal.
    assert without_cache_marks(marked[:1])[0].canonical() == Message.plain("user", "A").canonical()
