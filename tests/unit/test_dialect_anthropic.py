"""The Anthropic Messages translation (gateway/core/dialects/anthropic*.py): requests to the
internal form, answers and streams back — table-driven, no server."""

from __future__ import annotations

import copy
import json

import pytest

from gateway.core.dialects.anthropic import parse_messages_request
from gateway.core.dialects.anthropic_answer import anthropic_message, resent_form
from gateway.core.dialects.anthropic_stream import MessagesStream
from gateway.core.dialects.events import sse
from gateway.core.messages import Message
from gateway.errors import BadRequest


def parse(**body):
    return parse_messages_request({"model": "m", "max_tokens": 10, **body}, max_messages=100)


def test_system_string_and_blocks_become_one_system_message():
    assert parse(system="Be brief.", messages=[{"role": "user", "content": "hi"}]).messages == (
        Message.plain("system", "Be brief."), Message.plain("user", "hi"))
    blocks = parse(system=[{"type": "text", "text": "A", "cache_control": {"type": "ephemeral"}},
                           {"type": "text", "text": "B"}],
                   messages=[{"role": "user", "content": "hi"}])
    assert blocks.messages[0].to_openai() == {"role": "system", "content": [
        {"type": "text", "text": "A", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "B"}]}


def test_a_system_message_among_the_turns_is_an_instruction_where_it_was_sent():
    """Claude Code sends some of its instructions as `{"role": "system"}` messages among the
    turns; they are the client's instructions, text only."""
    parsed = parse(system="Be brief.", messages=[
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "Agents: Explore, Plan."},
        {"role": "system", "content": [{"type": "text", "text": "More."}]},
        {"role": "user", "content": "go"}])
    assert parsed.messages == (
        Message.plain("system", "Be brief."), Message.plain("user", "hi"),
        Message.plain("system", "Agents: Explore, Plan."),
        Message.plain("system", "More."),
        Message.plain("user", "go"))
    with pytest.raises(BadRequest, match=r"messages\.1\.0: only text blocks"):
        parse(messages=[{"role": "user", "content": "x"},
                        {"role": "system", "content": [{"type": "tool_result"}]}])
    with pytest.raises(BadRequest, match=r"messages\.0\.role"):
        parse(messages=[{"role": "robot", "content": "x"}])


def test_tool_use_and_result_become_a_paired_call_and_tool_message():
    parsed = parse(messages=[
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "w", "input": {"city": "Zürich"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1",
             "content": [{"type": "text", "text": "sunny"}]},
            {"type": "text", "text": "and tomorrow?"}]}])
    assert [m.to_openai() for m in parsed.messages] == [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "Checking.",
         "tool_calls": [{"id": "toolu_1", "type": "function",
                         "function": {"name": "w", "arguments": '{"city": "Zürich"}'}}],
         "thinking_blocks": [{"type": "thinking", "thinking": "hmm", "signature": "sig"}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
        {"role": "user", "content": "and tomorrow?"}]


def test_image_blocks_become_image_parts():
    parsed = parse(messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": "iVBOR"}},
        {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}}]}])
    assert parsed.messages[0].to_openai()["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}},
        {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}]


def test_request_fields_map_to_their_chat_names():
    parsed = parse(messages=[{"role": "user", "content": "x"}], stop_sequences=["END"],
                   temperature=0.2, stream=True, metadata={"user_id": "ann"},
                   tools=[{"name": "w", "description": "d", "input_schema": {"type": "object"}}],
                   tool_choice={"type": "any", "disable_parallel_tool_use": True})
    assert parsed.user == "ann" and parsed.stream
    assert parsed.passthrough == {
        "max_tokens": 10, "temperature": 0.2, "stream": True,
        "stream_options": {"include_usage": True}, "stop": ["END"], "user": "ann",
        "tools": [{"type": "function", "function": {"name": "w", "description": "d",
                                                    "parameters": {"type": "object"}}}],
        "tool_choice": "required", "parallel_tool_calls": False}


def test_a_long_composite_user_id_becomes_a_stable_valid_id():
    long_id = "user_" + "a" * 64 + "_account_x_session_" + "b" * 60
    first = parse(messages=[{"role": "user", "content": "x"}], metadata={"user_id": long_id})
    again = parse(messages=[{"role": "user", "content": "y"}], metadata={"user_id": long_id})
    assert first.user == again.user and first.user.startswith("u-") and len(first.user) < 128


@pytest.mark.parametrize("body, fragment", [
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": None}, "max_tokens"),
    ({"messages": [{"role": "user", "content": [{"type": "video"}]}]}, "unknown content block"),
    ({"messages": [{"role": "user", "content": [{"type": "document"}]}]}, "not supported"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result",
                                                 "tool_use_id": "t"}]}]}, "tool_use_id"),
    ({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t",
                                                      "name": "f", "input": {}}]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "u"}]}]},
     "corresponding `tool_use`"),
    ({"messages": [{"role": "assistant", "content": [{"type": "tool_result",
                                                      "tool_use_id": "t"}]}]}, "user messages"),
    ({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "server tools"),
])
def test_bad_requests_name_what_is_wrong(body, fragment):
    body = {"model": "m", "max_tokens": 10, **body}
    with pytest.raises(BadRequest) as raised:
        parse_messages_request(body, max_messages=100)
    assert fragment in raised.value.message


def test_parsing_mutates_nothing():
    body = {"model": "m", "max_tokens": 10, "system": [{"type": "text", "text": "s"}],
            "messages": [{"role": "assistant", "content": [
                {"type": "tool_use", "id": "t", "name": "f", "input": {"a": [1]}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}]}
    before = copy.deepcopy(body)
    parse_messages_request(body, max_messages=100)
    assert body == before


COMPLETION = {"id": "chatcmpl-1", "choices": [{"index": 0, "finish_reason": "tool_calls",
              "message": {"role": "assistant", "content": "Let me look.", "tool_calls": [
                  {"id": "call_1", "type": "function",
                   "function": {"name": "w", "arguments": '{"city":"Oslo"}'}}]}}],
              "usage": {"prompt_tokens": 30, "completion_tokens": 7,
                        "prompt_tokens_details": {"cached_tokens": 10}}}


def test_a_completion_becomes_a_message():
    assert anthropic_message(COMPLETION, "claude-x") == {
        "id": "msg_chatcmpl-1", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [{"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "call_1", "name": "w", "input": {"city": "Oslo"}}],
        "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": 20, "output_tokens": 7, "cache_read_input_tokens": 10}}


def test_a_reply_is_recorded_in_the_form_the_client_resends():
    reply = Message.from_openai(COMPLETION["choices"][0]["message"])
    resent = anthropic_message(COMPLETION, "m")["content"]
    parsed = parse(messages=[{"role": "user", "content": "q"},
                             {"role": "assistant", "content": resent}])
    assert resent_form(reply) == parsed.messages[1]
    assert resent_form(resent_form(reply)) == resent_form(reply)


def chunk(delta=None, finish=None, usage=None):
    out = {"id": "c1", "choices": [] if delta is None and finish is None else
           [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}
    if usage:
        out["usage"] = usage
    return out


def test_a_stream_follows_anthropics_event_sequence():
    stream = MessagesStream("m", input_tokens=12)
    chunks = [chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"}),
              chunk({"content": "lo"}),
              chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                     "function": {"name": "w", "arguments": ""}}]}),
              chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":'}}]}),
              chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
              chunk({}, "tool_calls"), chunk(usage={"prompt_tokens": 15, "completion_tokens": 4})]
    events = stream.start(chunks[0])
    for c in chunks:
        events += stream.chunk(c)
    events += stream.end()
    assert [(e["type"], e.get("index")) for e in events] == [
        ("message_start", None), ("ping", None),
        ("content_block_start", 0), ("content_block_delta", 0), ("content_block_delta", 0),
        ("content_block_stop", 0),
        ("content_block_start", 1), ("content_block_delta", 1), ("content_block_delta", 1),
        ("content_block_stop", 1), ("message_delta", None), ("message_stop", None)]
    assert events[0]["message"]["usage"] == {"input_tokens": 12, "output_tokens": 0}
    assert events[6]["content_block"] == {"type": "tool_use", "id": "call_1", "name": "w",
                                          "input": {}}
    assert events[-2] == {"type": "message_delta",
                          "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                          "usage": {"input_tokens": 15, "output_tokens": 4}}


@pytest.mark.parametrize("finish, matched, expected", [
    ("stop", "END", ("stop_sequence", "END")),  # vLLM, the fake: the sequence named
    ("stop", None, ("end_turn", None)),  # OpenAI's own API: not said
    ("stop", 128009, ("end_turn", None)),  # vLLM's stop token id: no sequence
    ("length", "END", ("max_tokens", None)),
])
def test_a_stop_sequence_the_upstream_names_is_carried(finish, matched, expected):
    choice = {"index": 0, "message": {"role": "assistant", "content": "cut"},
              "finish_reason": finish, "stop_reason": matched}
    message = anthropic_message({"id": "c", "choices": [choice]}, "m")
    assert (message["stop_reason"], message["stop_sequence"]) == expected
    stream = MessagesStream("m", input_tokens=1)
    events = stream.start(None) + stream.chunk(chunk({"content": "cut"}))
    events += stream.chunk({"id": "c", "choices": [
        {"index": 0, "delta": {}, "finish_reason": finish, "stop_reason": matched}]})
    final = (stream.end())[-2]
    assert (final["delta"]["stop_reason"], final["delta"]["stop_sequence"]) == expected


def test_reasoning_deltas_open_a_thinking_block_before_the_text():
    stream = MessagesStream("m", input_tokens=1)
    events = stream.start(None)
    events += stream.chunk(chunk({"reasoning_content": "think"}))
    events += stream.chunk(chunk({"content": "answer"}))
    events += stream.end()
    starts = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
    assert starts == ["thinking", "text"]


def test_a_failure_is_an_error_event_in_anthropics_shape():
    event = MessagesStream("m", 1).failure(429, "slow down")[0]
    assert event == {"type": "error", "error": {"type": "rate_limit_error",
                                                "message": "slow down"}}
    assert sse(event) == b"event: error\ndata: " + json.dumps(
        event, separators=(",", ":")).encode() + b"\n\n"


def test_gateway_markers_name_the_translated_messages_and_are_consumed():
    parsed = parse(system="s", messages=[
        {"role": "user", "content": "keep this", "x_gateway_pin": True},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f",
                                           "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                      "content": "big"}, {"type": "text", "text": "next"}],
         "x_gateway_one_shot": True}])
    assert parsed.pinned == {1} and parsed.one_shot == {3, 4}
    assert all("x_gateway" not in m.canonical() for m in parsed.messages)
    with pytest.raises(BadRequest):
        parse(messages=[{"role": "user", "content": "x", "x_gateway_pin": "yes"}])


def test_a_reply_with_thinking_is_recorded_with_it_as_the_client_resends_it():
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "sig"}
    completion = {"id": "c", "choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": "Yes.", "thinking_blocks": [thinking]}}]}
    content = anthropic_message(completion, "m")["content"]
    assert content == [thinking, {"type": "text", "text": "Yes."}]
    reply = Message.from_openai(completion["choices"][0]["message"])
    resent = parse(messages=[{"role": "user", "content": "q"},
                             {"role": "assistant", "content": content}]).messages[1]
    assert resent_form(reply) == resent


def test_extension_fields_cross_the_door_both_ways():
    parsed = parse(messages=[{"role": "user", "content": "x"}], x_bench_reply="scripted",
                   frobnicate=1)
    assert parsed.passthrough["x_bench_reply"] == "scripted"
    assert "frobnicate" not in parsed.passthrough  # only x_ fields are carried
    assert anthropic_message({**COMPLETION, "x_bench_forwarded": [1]}, "m")[
        "x_bench_forwarded"] == [1]
