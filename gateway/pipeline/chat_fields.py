"""The JSON type each field of a chat completion body may have, checked before anything uses it.

OpenAI's Chat Completions API defines a type for every field of the body and of each message;
a value of another JSON type (an array where a string goes, an object where a boolean goes)
is refused here with a 400 naming the field — never passed on to code that would hash it,
index it or compare it and fail with a 500 (`{"role": ["user"]}` did: `role in ROLES` raised
TypeError). Fields OpenAI does not define pass through unchecked: providers have extensions
of their own, and the gateway never reads them.

What is checked is each field's own JSON type, and one level further where the gateway or an
upstream reads inside it (tool calls, content parts, stream options, the items of `stop`,
`tools`, `modalities`). Values inside free-form objects (`metadata`, `response_format`,
`logit_bias`, a tool's JSON schema) are the upstream's to judge.
"""

from __future__ import annotations

from typing import Any, Mapping

from gateway.errors import BadRequest

STRING, NUMBER, INTEGER, BOOLEAN = "string", "number", "integer", "boolean"
OBJECT, ARRAY, NULL = "object", "array", "null"

_NOUNS = {STRING: "a string", NUMBER: "a number", INTEGER: "an integer",
          BOOLEAN: "a boolean", OBJECT: "an object", ARRAY: "an array", NULL: "null"}


def json_type(value: Any) -> str:
    """The JSON type of a parsed value (`bool` before `int`: True is not an integer here;
    a float with an integral value, `2.0`, is a number — OpenAI refuses it as an `n`)."""
    kind = type(value)
    if kind is str:
        return STRING
    if kind is bool:
        return BOOLEAN
    if kind is int:
        return INTEGER
    if kind is float:
        return NUMBER
    if kind is dict:
        return OBJECT
    if kind is list:
        return ARRAY
    if value is None:
        return NULL
    raise TypeError(f"not a parsed JSON value: {kind.__name__}")  # json.loads makes no other


def _accepts(allowed: frozenset[str], value: Any) -> bool:
    found = json_type(value)
    return found in allowed or (found == INTEGER and NUMBER in allowed)


def expected(allowed: frozenset[str]) -> str:
    """`a string or null` for {string, null}."""
    order = [STRING, NUMBER, INTEGER, BOOLEAN, OBJECT, ARRAY, NULL]
    names = [_NOUNS[t] for t in order if t in allowed]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def check_type(value: Any, allowed: frozenset[str], param: str) -> None:
    """`BadRequest` naming `param` unless `value` is of one of the `allowed` JSON types."""
    if not _accepts(allowed, value):
        raise BadRequest(f"Invalid type for `{param}`: expected {expected(allowed)}, but got "
                         f"{_NOUNS[json_type(value)]} instead.", param=param,
                         code="invalid_type")


def _types(*names: str) -> frozenset[str]:
    return frozenset(names)


_NUM = _types(NUMBER, NULL)
_INT = _types(INTEGER, NULL)
_BOOL = _types(BOOLEAN, NULL)
_STR = _types(STRING, NULL)
_OBJ = _types(OBJECT, NULL)

BODY_FIELDS: Mapping[str, frozenset[str]] = {
    # (model and messages are parsed by chat_request.py itself)
    "stream": _BOOL, "stream_options": _OBJ,
    "user": _STR, "conversation_id": _STR,
    "temperature": _NUM, "top_p": _NUM, "presence_penalty": _NUM, "frequency_penalty": _NUM,
    "n": _INT, "max_tokens": _INT, "max_completion_tokens": _INT, "seed": _INT,
    "top_logprobs": _INT, "logprobs": _BOOL, "parallel_tool_calls": _BOOL, "store": _BOOL,
    "logit_bias": _OBJ, "metadata": _OBJ, "response_format": _OBJ, "audio": _OBJ,
    "prediction": _OBJ, "web_search_options": _OBJ,
    "stop": _types(STRING, ARRAY, NULL), "modalities": _types(ARRAY, NULL),
    "tools": _types(ARRAY, NULL), "functions": _types(ARRAY, NULL),
    "tool_choice": _types(STRING, OBJECT, NULL), "function_call": _types(STRING, OBJECT, NULL),
    "service_tier": _STR, "reasoning_effort": _STR, "verbosity": _STR,
    "prompt_cache_key": _STR, "safety_identifier": _STR,
}
"""OpenAI's request fields with their JSON types (null: the field's default)."""

ITEM_TYPES: Mapping[str, frozenset[str]] = {
    "stop": _types(STRING), "modalities": _types(STRING), "tools": _types(OBJECT),
    "functions": _types(OBJECT),
}
"""What each item of an array field must be."""

MESSAGE_FIELDS: Mapping[str, frozenset[str]] = {
    "name": _types(STRING), "tool_call_id": _types(STRING), "tool_calls": _types(ARRAY, NULL),
    "function_call": _OBJ, "refusal": _STR, "audio": _OBJ,
}
"""A message's fields besides role and content (checked by chat_request.py)."""

_TOOL_CALL_FIELDS: Mapping[str, frozenset[str]] = {
    "id": _types(STRING), "type": _types(STRING), "function": _types(OBJECT),
}
_FUNCTION_FIELDS: Mapping[str, frozenset[str]] = {
    "name": _types(STRING), "arguments": _types(STRING),
}
PART_FIELDS: Mapping[str, frozenset[str]] = {
    "text": _types(STRING), "refusal": _types(STRING), "image_url": _types(OBJECT),
    "input_audio": _types(OBJECT), "file": _types(OBJECT),
}
"""A content part's fields by the name of their key (its `type` is checked by the caller)."""


def check_body_fields(body: Mapping[str, Any]) -> None:
    """Every OpenAI-defined field of the body has its JSON type (and its items theirs)."""
    for name, value in body.items():
        allowed = BODY_FIELDS.get(name)
        if allowed is None:
            continue
        check_type(value, allowed, name)
        if type(value) is list and name in ITEM_TYPES:
            for i, item in enumerate(value):
                check_type(item, ITEM_TYPES[name], f"{name}[{i}]")
        elif name == "stream_options" and type(value) is dict:
            for option in ("include_usage", "include_obfuscation"):
                if option in value:
                    check_type(value[option], _BOOL, f"stream_options.{option}")


def check_message_fields(data: Mapping[str, Any], where: str) -> None:
    """The defined fields of message `where` (`messages[3]`) besides role and content."""
    for name, allowed in MESSAGE_FIELDS.items():
        if name in data:
            check_type(data[name], allowed, f"{where}.{name}")
    calls = data.get("tool_calls")
    if calls:
        for i, call in enumerate(calls):
            at = f"{where}.tool_calls[{i}]"
            check_type(call, _types(OBJECT), at)
            _check_fields(call, _TOOL_CALL_FIELDS, at)
            if type(call.get("function")) is dict:
                _check_fields(call["function"], _FUNCTION_FIELDS, at + ".function")
    call = data.get("function_call")
    if type(call) is dict:
        _check_fields(call, _FUNCTION_FIELDS, f"{where}.function_call")


def check_part(part: Any, at: str) -> None:
    """A content part (`messages[0].content[2]`): an object with a string `type` and its
    defined fields typed; a text part needs its text."""
    check_type(part, _types(OBJECT), at)
    if "type" not in part:
        raise BadRequest(f"`{at}.type` is required.", param=f"{at}.type")
    check_type(part["type"], _types(STRING), f"{at}.type")
    if part["type"] == "text" and "text" not in part:
        raise BadRequest(f"`{at}.text` is required for a text part.", param=f"{at}.text")
    _check_fields(part, PART_FIELDS, at)


def _check_fields(data: Mapping[str, Any], fields: Mapping[str, frozenset[str]],
                  at: str) -> None:
    for name, allowed in fields.items():
        if name in data:
            check_type(data[name], allowed, f"{at}.{name}")
