"""The Responses API translation (gateway/core/dialects/responses*.py): requests to the
internal form, answers and streams back — table-driven, no server."""

from __future__ import annotations

import copy

import pytest

from gateway.core.dialects.responses import check_answers, parse_responses_request
from gateway.core.dialects.responses_answer import resent_form, response_object
from gateway.core.dialects.responses_stream import ResponsesStream
from gateway.core.messages import Message
from gateway.errors import BadRequest


def parse(**body):
    return parse_responses_request({"model": "m", **body}, max_messages=100)


def test_a_string_input_is_one_user_message_after_the_instructions():
    parsed = parse(input="hi", instructions="Be brief.")
    assert parsed.messages == (Message.plain("system", "Be brief."), Message.plain("user", "hi"))
    assert parsed.store is True and parsed.previous_response_id is None


def test_items_become_chat_messages_with_calls_and_outputs_paired():
    parsed = parse(input=[
        {"role": "user", "content": [{"type": "input_text", "text": "weather?"},
                                     {"type": "input_image", "image_url": "https://x.test/a.png"}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
        {"type": "function_call", "call_id": "call_1", "name": "w", "arguments": '{"c":1}'},
        {"type": "function_call", "call_id": "call_2", "name": "w", "arguments": '{"c":2}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "call_2", "output": "rain"}])
    assert [m.to_openai() for m in parsed.messages] == [
        {"role": "user", "content": [{"type": "text", "text": "weather?"},
                                     {"type": "image_url",
                                      "image_url": {"url": "https://x.test/a.png"}}]},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "w", "arguments": '{"c":1}'}},
            {"id": "call_2", "type": "function", "function": {"name": "w", "arguments": '{"c":2}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "rain"}]
    check_answers(parsed, frozenset())  # every output answers a call of this input


def test_request_fields_map_to_their_chat_names():
    parsed = parse(input="x", max_output_tokens=50, temperature=0.1, stream=True, user="ann",
                   tools=[{"type": "function", "name": "w", "parameters": {"type": "object"}}],
                   tool_choice={"type": "function", "name": "w"}, reasoning={"effort": "low"},
                   text={"format": {"type": "json_schema", "name": "s",
                                    "schema": {"type": "object"}}})
    assert parsed.passthrough == {
        "temperature": 0.1, "stream": True, "stream_options": {"include_usage": True},
        "max_tokens": 50, "user": "ann",
        "tools": [{"type": "function", "function": {"name": "w",
                                                    "parameters": {"type": "object"}}}],
        "tool_choice": {"type": "function", "function": {"name": "w"}},
        "response_format": {"type": "json_schema",
                            "json_schema": {"name": "s", "schema": {"type": "object"}}},
        "reasoning_effort": "low"}


@pytest.mark.parametrize("body, param", [
    ({}, "input"),
    ({"input": 3}, "input"),
    ({"input": [{"type": "computer_call"}]}, "input[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
     "input[0].content[0]"),
    ({"input": [{"type": "function_call", "call_id": "c"}]}, "input[0]"),
    ({"input": "x", "tools": [{"type": "file_search"}]}, "tools[0].type"),
    ({"input": "x", "conversation": "conv_1"}, "conversation"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "x", "text": {"format": {"type": "yaml"}}}, "text.format"),
])
def test_bad_requests_name_the_parameter(body, param):
    with pytest.raises(BadRequest) as raised:
        parse(**body)
    assert raised.value.param == param


def test_an_output_without_its_call_is_refused_unless_the_previous_response_asked_it():
    parsed = parse(input=[{"type": "function_call_output", "call_id": "call_9", "output": "4"}])
    with pytest.raises(BadRequest):
        check_answers(parsed, frozenset())
    check_answers(parsed, frozenset({"call_9"}))


def test_parsing_mutates_nothing():
    body = {"model": "m", "input": [{"role": "user", "content": [{"type": "input_text",
                                                                  "text": "x"}]}],
            "tools": [{"type": "function", "name": "w", "parameters": {"type": "object"}}]}
    before = copy.deepcopy(body)
    parse_responses_request(body, max_messages=100)
    assert body == before


COMPLETION = {"id": "c", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
    "role": "assistant", "content": "Let me look.", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "w", "arguments": "{}"}}]}}],
    "usage": {"prompt_tokens": 30, "completion_tokens": 7}}


def test_a_completion_becomes_a_response_with_message_and_call_items():
    response = response_object(parse(input="q"), "resp_abc", 1700000000, COMPLETION)
    assert response["status"] == "completed" and response["id"] == "resp_abc"
    assert response["output"] == [
        {"type": "message", "id": "msg_abc", "status": "completed", "role": "assistant",
         "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]},
        {"type": "function_call", "id": "fc_call_1", "call_id": "call_1", "name": "w",
         "arguments": "{}", "status": "completed"}]
    assert response["usage"]["total_tokens"] == 37


def test_a_cut_answer_is_incomplete():
    cut = {**COMPLETION, "choices": [{"index": 0, "finish_reason": "length",
                                      "message": {"role": "assistant", "content": "Lo"}}]}
    response = response_object(parse(input="q"), "resp_x", 0, cut)
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}


def test_a_reply_is_recorded_in_the_form_the_client_resends():
    reply = Message.from_openai(COMPLETION["choices"][0]["message"])
    output = response_object(parse(input="q"), "resp_x", 0, COMPLETION)["output"]
    resent = parse(input=[{"role": "user", "content": "q"}, *output]).messages[1]
    assert resent_form(reply) == resent


def chunk(delta=None, finish=None, usage=None):
    out = {"id": "c1", "choices": [] if delta is None and finish is None else
           [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}
    if usage:
        out["usage"] = usage
    return out


def test_a_stream_follows_the_responses_event_sequence():
    stream = ResponsesStream({"id": "resp_1", "object": "response", "status": "in_progress",
                              "output": []})
    events = stream.start(None)
    for c in [chunk({"role": "assistant", "content": ""}), chunk({"content": "Hi"}),
              chunk({"tool_calls": [{"index": 0, "id": "call_1",
                                     "function": {"name": "w", "arguments": "{"}}]}),
              chunk({"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]}),
              chunk({}, "tool_calls"), chunk(usage={"prompt_tokens": 5, "completion_tokens": 2})]:
        events += stream.chunk(c)
    events += stream.end()
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    final = events[-1]["response"]
    assert final["status"] == "completed"
    assert [i["type"] for i in final["output"]] == ["message", "function_call"]
    assert final["output"][1]["arguments"] == "{}"
    assert final["usage"]["total_tokens"] == 7
    assert stream.response == final


def test_an_added_item_event_keeps_what_it_said_when_the_call_grows():
    stream = ResponsesStream({"id": "resp_1", "output": []})
    added = stream.chunk(chunk({"tool_calls": [{"index": 0, "id": "c",
                                                "function": {"name": "w", "arguments": ""}}]}))
    stream.chunk(chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}))
    assert added[0]["item"]["arguments"] == ""


def test_gateway_markers_name_the_translated_messages_and_are_consumed():
    parsed = parse(instructions="s", input=[
        {"role": "user", "content": "keep this", "x_gateway_pin": True},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "big",
         "x_gateway_one_shot": True}])
    assert parsed.pinned == {1} and parsed.one_shot == {3}
    assert all("x_gateway" not in m.canonical() for m in parsed.messages)
    with pytest.raises(BadRequest):
        parse(input=[{"role": "user", "content": "x", "x_gateway_pin": True,
                      "x_gateway_one_shot": True}])


def test_extension_fields_cross_the_door_both_ways():
    parsed = parse(input="x", x_bench_reply="scripted")
    assert parsed.passthrough["x_bench_reply"] == "scripted"
    answer = response_object(parsed, "resp_1", 0, {**COMPLETION, "x_bench_forwarded": [1]})
    assert answer["x_bench_forwarded"] == [1]
