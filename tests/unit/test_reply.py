"""The reply recorded for a turn (gateway/core/reply.py): from a completion or from streamed
chunks, thinking included; the chat form without it."""

from __future__ import annotations

from gateway.core.reply import StreamAssembler, chat_form, reply_from_completion

THINKING = {"type": "thinking", "thinking": "Let me see.", "signature": "sig"}


def completion(message):
    return {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


def test_a_completion_keeps_thinking_and_the_chat_form_drops_it():
    reply = reply_from_completion(completion({"role": "assistant", "content": "Hi",
                                              "refusal": None, "thinking_blocks": [THINKING]}))
    assert reply.to_openai() == {"role": "assistant", "content": "Hi",
                                 "thinking_blocks": [THINKING]}
    assert chat_form(reply).to_openai() == {"role": "assistant", "content": "Hi"}


def test_streamed_thinking_is_assembled_into_its_block():
    assembler = StreamAssembler()
    for delta in [{"thinking_blocks": [{"type": "thinking", "thinking": "Let me"}]},
                  {"thinking_blocks": [{"type": "thinking", "thinking": " see."}]},
                  {"thinking_blocks": [{"type": "thinking", "signature": "sig"}]},
                  {"content": "Hi"}]:
        assembler.add({"choices": [{"index": 0, "delta": delta}]})
    assert assembler.message().to_openai() == {"role": "assistant", "content": "Hi",
                                               "thinking_blocks": [THINKING]}


def test_a_stream_of_tool_call_fragments_is_one_call():
    assembler = StreamAssembler()
    for delta in [{"tool_calls": [{"index": 0, "id": "c", "type": "function",
                                   "function": {"name": "f", "arguments": '{"a"'}}]},
                  {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}]:
        assembler.add({"choices": [{"index": 0, "delta": delta}]})
    assembler.add({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    assert assembler.complete
    assert assembler.message().to_openai()["tool_calls"] == [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]
