"""Anthropic Messages answers: a `chat.completion` as a Messages `message` (content blocks,
stop reason, usage), errors in Anthropic's shape, and the form a reply is recorded in.

Invariant: a resent reply translates to exactly the message recorded for it (`resent_form`),
so a stateless Anthropic client reconciles like a chat client.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from gateway.core.dialects.anthropic import assistant_message
from gateway.core.dialects.marks import extensions
from gateway.core.messages import Message

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                "function_call": "tool_use", "content_filter": "refusal"}


ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 529: "overloaded_error"}


def resent_form(reply: Message) -> Message:
    """The recorded form of an upstream reply: what its Anthropic translation becomes when the
    client sends it back (tool arguments re-encoded the one way this module encodes them)."""
    return assistant_message(reply_blocks(reply.to_openai()))


def anthropic_message(completion: Mapping[str, Any], model: str) -> dict[str, Any]:
    """A `chat.completion` as a Messages API `message` (`model`: the name the client asked)."""
    choices = completion.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], Mapping) else {}
    message = choice.get("message") if isinstance(choice.get("message"), Mapping) else {}
    reason, sequence = stop_fields(choice.get("finish_reason"), choice.get("stop_reason"))
    return {"id": message_id(completion.get("id")), "type": "message", "role": "assistant",
            "model": model, "content": reply_blocks(message),
            "stop_reason": reason, "stop_sequence": sequence,
            "usage": usage(completion.get("usage")), **extensions(completion)}


def reply_blocks(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An OpenAI assistant message's content as Messages content blocks."""
    blocks = [dict(b) for b in message.get("thinking_blocks") or [] if isinstance(b, Mapping)]
    content = message.get("content")
    if isinstance(content, str) and content:
        blocks.append({"type": "text", "text": content})
    elif isinstance(content, list):
        blocks += [{"type": "text", "text": p["text"]} for p in content
                   if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        blocks.append({"type": "tool_use", "id": call.get("id") or "",
                       "name": function.get("name") or "",
                       "input": tool_input(function.get("arguments"))})
    return blocks


def tool_input(arguments: Any) -> dict[str, Any]:
    """A call's JSON arguments as the object Anthropic's `input` must be (an upstream that
    sent something else: kept under `arguments`, never lost)."""
    try:
        value = json.loads(arguments) if isinstance(arguments, str) and arguments else {}
    except ValueError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"arguments": value}


def stop_reason(finish_reason: Any) -> str:
    return STOP_REASONS.get(finish_reason, "end_turn")


def stop_fields(finish_reason: Any, matched: Any) -> tuple[str, str | None]:
    """Anthropic's `stop_reason` and `stop_sequence` for a choice's `finish_reason` and its
    `stop_reason` — the stop sequence the text ended at, where the upstream names it (vLLM's
    OpenAI-compatible server and the fake upstream do; OpenAI's own API does not, and a stop
    there reads `end_turn`). vLLM names a stop token by its id (an int): not a sequence."""
    if finish_reason == "stop" and isinstance(matched, str) and matched:
        return "stop_sequence", matched
    return stop_reason(finish_reason), None


def usage(data: Any) -> dict[str, int]:
    """OpenAI `usage` as Anthropic's: prompt tokens read from the cache are counted apart, as
    Anthropic does (its `input_tokens` excludes them)."""
    data = data if isinstance(data, Mapping) else {}
    prompt = _count(data.get("prompt_tokens"))
    details = data.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
    out = {"input_tokens": max(prompt - cached, 0),
           "output_tokens": _count(data.get("completion_tokens"))}
    if cached:
        out["cache_read_input_tokens"] = cached
    return out


def error_body(status: int, message: str) -> dict[str, Any]:
    """Anthropic's error shape for an HTTP status."""
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def message_id(completion_id: Any) -> str:
    return "msg_" + (completion_id if isinstance(completion_id, str) and completion_id
                     else "gateway")


def _count(value: Any) -> int:
    return value if type(value) is int and value >= 0 else 0
