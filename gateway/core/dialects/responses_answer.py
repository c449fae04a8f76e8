"""Responses API answers: a `chat.completion` as a `response` (a message item and function
call items, status, usage), its parts as the stream builds them, and the form a reply is
recorded in (what its output items become when sent back as input).
"""

from __future__ import annotations

from typing import Any, Mapping

from gateway.core.dialects.marks import extensions
from gateway.core.dialects.responses import ResponsesRequest, input_messages
from gateway.core.messages import Message

def response_object(request: ResponsesRequest, response_id: str, created_at: int,
                    completion: Mapping[str, Any]) -> dict[str, Any]:
    """The finished `response` for a `chat.completion`."""
    choices = completion.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], Mapping) else {}
    message = choice.get("message") if isinstance(choice.get("message"), Mapping) else {}
    return {**finished(shell(request, response_id, created_at),
                       output_items(message, response_id), choice.get("finish_reason"),
                       completion.get("usage")), **extensions(completion)}


def shell(request: ResponsesRequest, response_id: str, created_at: int) -> dict[str, Any]:
    """The `response` before any output: what `response.created` announces."""
    return {"id": response_id, "object": "response", "created_at": created_at,
            "status": "in_progress", "model": request.model, "output": [], "error": None,
            "incomplete_details": None, "previous_response_id": request.previous_response_id,
            "store": request.store, "usage": None, **request.echo}


def finished(response: Mapping[str, Any], output: list[dict[str, Any]], finish_reason: Any,
             usage_data: Any) -> dict[str, Any]:
    incomplete = finish_reason == "length"
    return {**response, "status": "incomplete" if incomplete else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "output": output, "usage": usage(usage_data)}


def output_items(message: Mapping[str, Any], response_id: str) -> list[dict[str, Any]]:
    """An assistant chat message as output items; ids derived from the response's."""
    items: list[dict[str, Any]] = []
    content = message.get("content")
    if isinstance(content, list):
        texts = [p["text"] for p in content
                 if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
    else:
        texts = [content] if isinstance(content, str) and content else []
    if texts:
        items.append(message_item(response_id, [text_part(t) for t in texts]))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        items.append(call_item(call.get("id") or "", function.get("name") or "",
                               function.get("arguments") or ""))
    return items


def message_item(response_id: str, parts: list[dict[str, Any]],
                 status: str = "completed") -> dict[str, Any]:
    return {"type": "message", "id": "msg_" + response_id.removeprefix("resp_"),
            "status": status, "role": "assistant", "content": parts}


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": []}


def call_item(call_id: str, name: str, arguments: str,
              status: str = "completed") -> dict[str, Any]:
    return {"type": "function_call", "id": "fc_" + call_id, "call_id": call_id, "name": name,
            "arguments": arguments, "status": status}


def asked_calls(response: Mapping[str, Any]) -> frozenset[str]:
    """The call ids a stored `response` asked the client to answer."""
    return frozenset(i["call_id"] for i in response.get("output") or []
                     if isinstance(i, Mapping) and i.get("type") == "function_call"
                     and isinstance(i.get("call_id"), str))


def resent_form(reply: Message) -> Message:
    """The recorded form of an upstream reply: what its output items become when the client
    sends them back as input."""
    messages = input_messages(output_items(reply.to_openai(), "resp_x")).messages
    return messages[0] if len(messages) == 1 else reply


def usage(data: Any) -> dict[str, Any]:
    data = data if isinstance(data, Mapping) else {}
    prompt, completion = _count(data.get("prompt_tokens")), _count(data.get("completion_tokens"))
    details = data.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
    reasoning = data.get("completion_tokens_details")
    thought = _count(reasoning.get("reasoning_tokens")) if isinstance(reasoning, Mapping) else 0
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": thought},
            "total_tokens": prompt + completion}


def _count(value: Any) -> int:
    return value if type(value) is int and value >= 0 else 0
