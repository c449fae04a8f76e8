"""Parsing and validating a chat completion request body into typed values.

Only what the gateway itself relies on is checked (model, messages, stream, ids); every other
field is kept as sent and passed upstream untouched. Problems raise `BadRequest` naming the
offending parameter, so the client gets a 400 in OpenAI's error shape and never a 500.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gateway.core.messages import ROLES, Message
from gateway.errors import BadRequest

# Fields the gateway consumes; they are not forwarded upstream.
GATEWAY_FIELDS = ("conversation_id",)


@dataclass(frozen=True, slots=True)
class ChatRequest:
    model: str
    messages: tuple[Message, ...]
    stream: bool
    conversation_id: str | None
    user: str | None
    passthrough: dict[str, Any]
    """Every other field of the body, forwarded as sent (temperature, tools, ...)."""

    @property
    def instructions(self) -> tuple[Message, ...]:
        """The client's system/developer messages, in order."""
        return tuple(m for m in self.messages if m.is_instruction)

    @property
    def incoming(self) -> tuple[Message, ...]:
        """Every other message: the conversation as this client sends it."""
        return tuple(m for m in self.messages if not m.is_instruction)


def parse_body(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"The request body is not valid JSON: {exc}", code="invalid_json")
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.", code="invalid_json")
    return body


def parse_chat_request(body: dict[str, Any]) -> ChatRequest:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("`model` is required and must be a non-empty string.", param="model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("`messages` is required and must be a non-empty array.",
                         param="messages")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise BadRequest("`stream` must be a boolean.", param="stream")
    conversation_id = _optional_str(body, "conversation_id")
    user = _optional_str(body, "user")
    passthrough = {k: v for k, v in body.items()
                   if k not in ("model", "messages", *GATEWAY_FIELDS)}
    return ChatRequest(model=model,
                       messages=tuple(_message(m, i) for i, m in enumerate(messages)),
                       stream=stream, conversation_id=conversation_id, user=user,
                       passthrough=passthrough)


def _optional_str(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"`{name}` must be a string.", param=name)
    return value


def _message(data: Any, index: int) -> Message:
    where = f"messages[{index}]"
    if not isinstance(data, dict):
        raise BadRequest(f"`{where}` must be an object.", param=where)
    role = data.get("role")
    if role not in ROLES:
        raise BadRequest(f"`{where}.role` must be one of {', '.join(sorted(ROLES))}; "
                         f"got {role!r}.", param=f"{where}.role")
    content = data.get("content")
    if content is None:
        if role not in ("assistant", "function") or not (data.get("tool_calls")
                                                          or data.get("function_call")):
            raise BadRequest(f"`{where}.content` is required.", param=f"{where}.content")
    elif isinstance(content, list):
        for j, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise BadRequest(f"`{where}.content[{j}]` must be an object with a `type`.",
                                 param=f"{where}.content")
            if part["type"] == "text" and not isinstance(part.get("text"), str):
                raise BadRequest(f"`{where}.content[{j}].text` must be a string.",
                                 param=f"{where}.content")
    elif not isinstance(content, str):
        raise BadRequest(f"`{where}.content` must be a string or an array of content parts.",
                         param=f"{where}.content")
    if role == "tool" and not isinstance(data.get("tool_call_id"), str):
        raise BadRequest(f"`{where}.tool_call_id` is required for tool messages.",
                         param=f"{where}.tool_call_id")
    tool_calls = data.get("tool_calls")
    if tool_calls is not None and not (
        isinstance(tool_calls, list) and all(isinstance(c, dict) for c in tool_calls)
    ):
        raise BadRequest(f"`{where}.tool_calls` must be an array of objects.",
                         param=f"{where}.tool_calls")
    return Message.from_openai(data)
