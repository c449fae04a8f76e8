"""Every field of a chat completion body is checked for its JSON type before use: a value of
any other type — unhashable and nested ones included — is a `BadRequest` naming the field,
never another exception (which the app would answer with a 500)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.config import RequestLimitsConfig
from gateway.errors import BadRequest
from gateway.pipeline.chat_fields import (
    BODY_FIELDS,
    MESSAGE_FIELDS,
    PART_FIELDS,
    json_type,
)
from gateway.pipeline.chat_request import parse_body, parse_chat_request

LIMITS = RequestLimitsConfig()
SAMPLES: dict[str, Any] = {
    "string": "user", "integer": 3, "number": 0.5, "boolean": True, "null": None,
    "array": ["user"], "object": {"role": "user"},
    "nested array": [[{"a": [1]}]], "nested object": {"a": {"b": [{"c": None}]}},
}
"""One value of each JSON type; the unhashable ones (arrays, objects) nested too."""


def _body(**fields: Any) -> dict[str, Any]:
    return {"model": "echo", "messages": [{"role": "user", "content": "hi"}], **fields}


def _parse(body: dict[str, Any]) -> Any:
    # Through JSON text, as a client sends it.
    return parse_chat_request(parse_body(json.dumps(body).encode()), LIMITS)


def _refused(body: dict[str, Any]) -> BadRequest:
    with pytest.raises(BadRequest) as caught:
        _parse(body)
    error = caught.value.body()["error"]
    assert error["message"] and error["type"] == "invalid_request_error"
    return caught.value


def _allowed(allowed: frozenset[str], value: Any) -> bool:
    found = json_type(value)
    return found in allowed or (found == "integer" and "number" in allowed)


@pytest.mark.parametrize("sample", SAMPLES)
@pytest.mark.parametrize("name", sorted(BODY_FIELDS))
def test_each_body_field_of_another_json_type_is_a_400_naming_it(name, sample):
    value = SAMPLES[sample]
    body = _body(**{name: value})
    if _allowed(BODY_FIELDS[name], value):
        try:
            _parse(body)
        except BadRequest as exc:  # allowed type, but its items or options may be checked
            assert exc.param is not None and exc.param.startswith(name), exc.message
    else:
        assert _refused(body).param == name


@pytest.mark.parametrize("sample", SAMPLES)
@pytest.mark.parametrize("name", ["model", "messages"])
def test_model_and_messages_of_another_json_type_are_a_400_naming_them(name, sample):
    value = SAMPLES[sample]
    if name == "model" and value == "user":
        value = ""  # a string is a model's type; the empty one is refused
    param = _refused(_body(**{name: value})).param
    # An array of messages is the right type: then its first item is at fault.
    assert param == (f"{name}[0]" if name == "messages" and isinstance(value, list) else name)


@pytest.mark.parametrize("sample", SAMPLES)
@pytest.mark.parametrize("role", ["user", "assistant", "tool"])
@pytest.mark.parametrize("name", ["role", "content", *sorted(MESSAGE_FIELDS)])
def test_each_message_field_of_another_json_type_is_a_400_naming_it(name, role, sample):
    value = SAMPLES[sample]
    message: dict[str, Any] = {"role": role, "content": "hi"}
    if role == "tool":
        message["tool_call_id"] = "call-1"
    message[name] = value
    body = _body(messages=[{"role": "user", "content": "first"}, message])
    where = f"messages[1].{name}"
    if name == "role":
        if value == "user":
            _parse(body)
        else:
            assert _refused(body).param == where
        return
    try:
        _parse(body)
    except BadRequest as exc:
        assert exc.param is not None and exc.param.startswith(where), (exc.param, exc.message)
    else:
        allowed = MESSAGE_FIELDS.get(name, frozenset({"string", "array", "null"}))
        assert _allowed(allowed, value) or (name == "content" and value is None), value


def test_the_role_as_a_list_or_an_object_is_a_400_not_a_500():
    # The reproduction: `role not in ROLES` raised TypeError (unhashable).
    for role in (["user"], {"user": 1}, [["user"]]):
        error = _refused(_body(messages=[{"role": role, "content": "hi"}]))
        assert error.param == "messages[0].role" and "string" in error.message


@pytest.mark.parametrize("sample", SAMPLES)
@pytest.mark.parametrize("name", ["type", *sorted(PART_FIELDS)])
def test_each_content_part_field_of_another_json_type_is_a_400_naming_it(name, sample):
    value = SAMPLES[sample]
    part: dict[str, Any] = {"type": "text", "text": "hi", name: value}
    body = _body(messages=[{"role": "user", "content": [part]}])
    where = f"messages[0].content[0].{name}"
    allowed = PART_FIELDS.get(name, frozenset({"string"}))
    if _allowed(allowed, value) and not (name == "type" and value != "text"):
        _parse(body)
    elif name == "type" and value == "user":
        _parse(body)  # a part of a type the gateway does not read: passed on as sent
    else:
        assert _refused(body).param == where


@pytest.mark.parametrize("sample", SAMPLES)
@pytest.mark.parametrize("field", ["id", "type", "function", "function.name",
                                   "function.arguments"])
def test_each_tool_call_field_of_another_json_type_is_a_400_naming_it(field, sample):
    value = SAMPLES[sample]
    call: dict[str, Any] = {"id": "c1", "type": "function",
                            "function": {"name": "f", "arguments": "{}"}}
    if field.startswith("function."):
        call["function"] = {**call["function"], field.split(".")[1]: value}
    else:
        call[field] = value
    body = _body(messages=[{"role": "user", "content": "hi"},
                           {"role": "assistant", "content": None, "tool_calls": [call]}])
    expected = "object" if field == "function" else "string"
    if json_type(value) == expected:
        _parse(body)
    else:
        assert _refused(body).param == f"messages[1].tool_calls[0].{field}"


@pytest.mark.parametrize("sample", SAMPLES)
def test_a_whole_message_or_tool_call_of_another_json_type_is_a_400_naming_it(sample):
    value = SAMPLES[sample]
    if not isinstance(value, dict):
        assert _refused(_body(messages=[value])).param == "messages[0]"
        calls = [{"role": "assistant", "content": None, "tool_calls": [value]}]
        assert _refused(_body(messages=calls)).param == "messages[0].tool_calls[0]"


def test_valid_requests_parse_as_before():
    chat = _parse(_body(stream=True, stream_options={"include_usage": True}, temperature=1,
                        top_p=0.5, n=1, stop=["x"], tools=[{"type": "function"}],
                        tool_choice="auto", user="u1", conversation_id="c1", metadata={},
                        x_vendor_field=[["anything"]]))
    assert chat.stream and chat.user == "u1" and chat.conversation_id == "c1"
    assert chat.passthrough["x_vendor_field"] == [["anything"]]  # unknown: passed on as sent
    assert _parse(_body(stream=None)).stream is False
