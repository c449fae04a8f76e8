"""Same-dialect pass-through's pure halves: the chat form back in Anthropic's request form
(gateway/core/dialects/anthropic_outbound.py) and an Anthropic answer read in the chat form
(gateway/core/dialects/anthropic_inbound.py)."""

from __future__ import annotations

import pytest

from gateway.core.dialects.anthropic import parse_messages_request
from gateway.core.dialects.anthropic_inbound import EventReader, completion_from_message
from gateway.core.dialects.anthropic_outbound import (OPENING, anthropic_request,
                                                     errored_tool_uses, kept_marks,
                                                     tool_result_marks)
from gateway.core.messages import Message
from gateway.core.reply import StreamAssembler, reply_from_completion

HISTORIES = [
    [{"role": "user", "content": "plain"}],
    [{"role": "user", "content": [{"type": "text", "text": "a"},
                                  {"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}}]},
     {"role": "assistant", "content": "reply"},
     {"role": "user", "content": [{"type": "image", "source": {
         "type": "base64", "media_type": "image/png", "data": "iVBO"}},
         {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}}]}],
    [{"role": "user", "content": "weather?"},
     {"role": "assistant", "content": [
         {"type": "thinking", "thinking": "t", "signature": "s"},
         {"type": "text", "text": "Checking."},
         {"type": "tool_use", "id": "t1", "name": "w", "input": {"city": "Oslo"}},
         {"type": "tool_use", "id": "t2", "name": "w", "input": {"city": "Lima"}}]},
     {"role": "user", "content": [
         {"type": "tool_result", "tool_use_id": "t1", "content": "down", "is_error": True},
         {"type": "tool_result", "tool_use_id": "t2",
          "content": [{"type": "text", "text": "sunny"}, {"type": "text", "text": ", 21 °C"}]}]},
     {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "xyz"},
                                       {"type": "text", "text": "Lima is sunny."}]}],
]


@pytest.mark.parametrize("history", HISTORIES)
def test_a_parsed_request_translates_back_to_what_the_client_sent(history):
    body = {"model": "m", "max_tokens": 5, "system": "Be brief.", "messages": history}
    parsed = parse_messages_request(body, max_messages=100)
    system, messages = anthropic_request(parsed.messages, errored_tool_uses(body))
    assert system == [{"type": "text", "text": "Be brief."}]
    assert messages == history


MARK = {"type": "ephemeral"}
MARKED = [{"role": "user", "content": "task"},
          {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read",
                                             "input": {}}]},
          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                        "content": "file text", "cache_control": MARK},
                                       {"type": "text", "text": "<system-reminder>r"
                                                                "</system-reminder>"}]}]


def test_a_client_s_mark_on_a_tool_result_goes_back_with_the_result_as_sent():
    body = {"model": "m", "max_tokens": 5, "messages": MARKED}
    parsed = parse_messages_request(body, max_messages=100)
    marks = tool_result_marks(body)
    assert marks == {"t1": (MARK, "file text")} and kept_marks(marks, parsed.messages) == 1
    _, messages = anthropic_request(parsed.messages, marks=marks)
    assert messages == MARKED
    # a result the rewrite cleared is not the client's: its mark is gone with its text
    cleared = [m.with_content("[tool result cleared]") if m.role == "tool" else m
               for m in parsed.messages]
    assert kept_marks(marks, cleared) == 0
    _, messages = anthropic_request(cleared, marks=marks)
    assert "cache_control" not in messages[2]["content"][0]


def test_a_mark_the_gateway_put_in_a_result_s_text_goes_on_the_result():
    result = Message.of("tool", [{"type": "text", "text": "out", "cache_control": MARK}],
                        tool_call_id="t1")
    _, messages = anthropic_request([
        Message.plain("user", "task"),
        Message.of("assistant", None, tool_calls=[{"id": "t1", "type": "function",
                                                   "function": {"name": "Read",
                                                                "arguments": "{}"}}]),
        result])
    assert messages[2]["content"] == [{"type": "tool_result", "tool_use_id": "t1",
                                       "content": "out", "cache_control": MARK}]


def test_a_conversation_the_rewrite_left_opening_with_the_model_opens_with_the_user():
    _, messages = anthropic_request([Message.plain("assistant", "the last answer"),
                                     Message.plain("user", "yes, do that")])
    assert messages == [{"role": "user", "content": OPENING},
                        {"role": "assistant", "content": "the last answer"},
                        {"role": "user", "content": "yes, do that"}]


def test_memory_system_messages_anywhere_join_the_system_blocks_in_order():
    system, messages = anthropic_request([
        Message.plain("system", "client"), Message.plain("user", "q"),
        Message.of("system", [{"type": "text", "text": "recalled",
                               "cache_control": {"type": "ephemeral"}}])])
    assert system == [{"type": "text", "text": "client"},
                      {"type": "text", "text": "recalled", "cache_control": {"type": "ephemeral"}}]
    assert messages == [{"role": "user", "content": "q"}]


def test_a_message_answer_reads_as_the_completion_litellm_would_give():
    completion = completion_from_message({
        "id": "msg_1", "type": "message", "model": "c", "stop_reason": "stop_sequence",
        "stop_sequence": "##", "content": [
            {"type": "thinking", "thinking": "t", "signature": "s"},
            {"type": "text", "text": "Hi"},
            {"type": "tool_use", "id": "t1", "name": "w", "input": {"a": 1}}],
        "usage": {"input_tokens": 10, "cache_read_input_tokens": 5,
                  "cache_creation_input_tokens": 2, "output_tokens": 3}})
    (choice,) = completion["choices"]
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", "##")
    assert completion["usage"] == {
        "prompt_tokens": 17, "completion_tokens": 3, "total_tokens": 20,
        "prompt_tokens_details": {"cached_tokens": 5}, "cache_read_input_tokens": 5,
        "cache_creation_input_tokens": 2}
    reply = reply_from_completion(completion)
    assert reply.to_openai() == {
        "role": "assistant", "content": "Hi",
        "thinking_blocks": [{"type": "thinking", "thinking": "t", "signature": "s"}],
        "tool_calls": [{"id": "t1", "type": "function",
                        "function": {"name": "w", "arguments": '{"a": 1}'}}]}


def test_stream_events_assemble_to_the_same_reply_and_usage():
    events = [
        {"type": "message_start", "message": {"id": "m1", "usage": {"input_tokens": 8,
                                                                    "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking",
                                                                      "thinking": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta",
                                                              "thinking": "hm"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta",
                                                              "signature": "s"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "ping"},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text",
                                                                      "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta",
                                                              "text": "Hel"}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta",
                                                              "text": "lo"}},
        {"type": "content_block_start", "index": 2, "content_block": {
            "type": "tool_use", "id": "t1", "name": "w", "input": {}}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta",
                                                              "partial_json": '{"a":'}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta",
                                                              "partial_json": "1}"}},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
         "usage": {"output_tokens": 6}},
        {"type": "message_stop"}]
    reader, assembler = EventReader(), StreamAssembler()
    for event in events:
        assembler.add(reader.chunk(event))
    assert assembler.finish_reason == "tool_calls" and assembler.complete
    assert assembler.usage == {"prompt_tokens": 8, "completion_tokens": 6, "total_tokens": 14}
    assert assembler.message().to_openai() == {
        "role": "assistant", "content": "Hello",
        "tool_calls": [{"id": "t1", "type": "function",
                        "function": {"name": "w", "arguments": '{"a":1}'}}],
        "thinking_blocks": [{"type": "thinking", "thinking": "hm", "signature": "s"}]}
