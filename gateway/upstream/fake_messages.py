"""The fake upstream in Anthropic's Messages form: what the fake server answers at
`POST /v1/messages` (gateway/upstream/fake_server.py), so a route whose provider is Anthropic
(`anthropic/<behaviour>` with `api_base` at the fake server) is testable offline end to end.

The model name selects the same behaviours as the chat form (gateway/upstream/fake.py):

- `echo` (and any unknown name) — one text block: the text blocks of the last user message
  that has any (a message of tool results only is skipped, as the chat form skips `tool`
  messages).
- `echo-messages` — one text block, `json.dumps` of the `messages` received, the `system`
  prompt (string or blocks) first as `{"role": "system", "content": system}` when one was sent.
- `slow`, `slow-<ms>` — `echo` after a delay, spread over the events when streaming.
- `error`, `error-<status>` — that HTTP status with Anthropic's error body.
- `tool-call` — one `tool_use` block calling the request's first tool (`echo` if it sent
  none) with `{"input": <last user text>}`, stop reason `tool_use`.
- `cached-<n>` — `echo`, its usage saying n input tokens (at most all) were read from the
  prompt cache (`cache_read_input_tokens`, which Anthropic counts apart from `input_tokens`).

`stop_sequences`: an echoed text that holds one is cut before the first that occurs, with
stop reason `stop_sequence` and that sequence in `stop_sequence`, as Anthropic answers.
Streams are Anthropic's event sequence: `message_start`, `content_block_start`, `ping`, the
block's deltas, `content_block_stop`, `message_delta` (stop reason, usage), `message_stop`.
Tokens are counted with cl100k (not Claude's tokenizer: the counts are the fake's own).
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Mapping

from gateway.core.dialects.anthropic_answer import error_body as anthropic_error_body
from gateway.upstream.fake import Behaviour, FakeModel, cut_at_stop, pieces, text_of


def request_problem(body: Mapping[str, Any]) -> tuple[str, str] | None:
    """(message, field) of what Anthropic would refuse with 400 among the fields the fake
    reads, or None. Hostile input is a 4xx, never a crash."""
    if not isinstance(body.get("model"), str):
        return "model: Field required.", "model"
    max_tokens = body.get("max_tokens")
    if type(max_tokens) is not int or max_tokens < 1:
        return "max_tokens: Field required (an integer of at least 1).", "max_tokens"
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(
            isinstance(m, dict) and m.get("role") in ("user", "assistant")
            and isinstance(m.get("content"), (str, list)) for m in messages):
        return "messages: an array of user and assistant messages.", "messages"
    if not all(isinstance(b, dict) for m in messages if isinstance(m["content"], list)
               for b in m["content"]):
        return "messages: content blocks are objects.", "messages"
    system = body.get("system")
    if system is not None and not isinstance(system, (str, list)):
        return "system: a string or an array of text blocks.", "system"
    if body.get("stream") is not None and not isinstance(body.get("stream"), bool):
        return "stream: Input should be a valid boolean.", "stream"
    stop = body.get("stop_sequences")
    if stop is not None and not (isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        return "stop_sequences: Input should be an array of strings.", "stop_sequences"
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list)
                                  and all(isinstance(t, dict) for t in tools)):
        return "tools: Input should be an array of tool objects.", "tools"
    return None


def error_body(behaviour: Behaviour) -> dict[str, Any]:
    """Anthropic's error shape for an `error*` behaviour."""
    return anthropic_error_body(behaviour.status, f"The fake upstream ({behaviour.name}) failed "
                                                  f"with HTTP {behaviour.status}, as asked.")


def bad_request_body(message: str) -> dict[str, Any]:
    return anthropic_error_body(400, message)


class FakeMessages:
    """Turns a Messages request into the fake's Anthropic answer (no I/O, no sleeping)."""

    def __init__(self, model: FakeModel) -> None:
        self._model = model

    def message(self, behaviour: Behaviour, body: Mapping[str, Any]) -> dict[str, Any]:
        """A Messages API `message`; the caller handles `error` behaviours (`error_body`)."""
        block, stop_reason, stop_sequence = self._reply(behaviour, body)
        return {"id": _new_id(), "type": "message", "role": "assistant",
                "model": f"fake/{behaviour.name}", "content": [block],
                "stop_reason": stop_reason, "stop_sequence": stop_sequence,
                "usage": self._usage(body, block, behaviour.cached)}

    def events(self, behaviour: Behaviour, body: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The events of a streamed answer, in Anthropic's order."""
        block, stop_reason, stop_sequence = self._reply(behaviour, body)
        usage = self._usage(body, block, behaviour.cached)
        start = {**usage, "output_tokens": 1}  # Anthropic's message_start says 1 so far
        message = {"id": _new_id(), "type": "message", "role": "assistant",
                   "model": f"fake/{behaviour.name}", "content": [], "stop_reason": None,
                   "stop_sequence": None, "usage": start}
        if block["type"] == "text":
            opened: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in pieces(block["text"])]
        else:
            opened = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": p}
                      for p in pieces(json.dumps(block["input"], ensure_ascii=False))]
        return [{"type": "message_start", "message": message},
                {"type": "content_block_start", "index": 0, "content_block": opened},
                {"type": "ping"},
                *({"type": "content_block_delta", "index": 0, "delta": d} for d in deltas),
                {"type": "content_block_stop", "index": 0},
                {"type": "message_delta",
                 "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                 "usage": {"output_tokens": usage["output_tokens"]}},
                {"type": "message_stop"}]

    def _reply(self, behaviour: Behaviour, body: Mapping[str, Any]
               ) -> tuple[dict[str, Any], str, str | None]:
        """The one content block, the stop reason and the matched stop sequence."""
        messages = body.get("messages") or []
        if behaviour.kind == "echo-messages":
            system = body.get("system")
            sent = ([{"role": "system", "content": system}] if system else []) + list(messages)
            return {"type": "text", "text": json.dumps(sent, ensure_ascii=False)}, \
                "end_turn", None
        text = _last_user_text(messages)
        if behaviour.kind == "tool-call":
            tools = body.get("tools") or []
            name = tools[0].get("name") if tools and isinstance(tools[0].get("name"), str) \
                else "echo"
            return {"type": "tool_use", "id": "toolu_fake_" + uuid.uuid4().hex[:20],
                    "name": name, "input": {"input": text}}, "tool_use", None
        text, matched = cut_at_stop(text, body.get("stop_sequences") or [])
        return {"type": "text", "text": text}, \
            "end_turn" if matched is None else "stop_sequence", matched

    def _usage(self, body: Mapping[str, Any], block: Mapping[str, Any],
               cached: int) -> dict[str, int]:
        system = body.get("system")
        total = self._model.count(text_of(system)) if system else 0
        for message in body.get("messages") or []:
            total += 3 + self._model.count(text_of(message.get("content")))
        reply = block["text"] if block["type"] == "text" else json.dumps(block["input"])
        usage = {"input_tokens": total, "output_tokens": self._model.count(reply)}
        if cached:
            read = min(cached, total)
            usage.update(input_tokens=total - read, cache_read_input_tokens=read)
        return usage


def _new_id() -> str:
    return "msg_fake_" + uuid.uuid4().hex[:20]


def _last_user_text(messages: list[Any]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if any(b.get("type") == "text" for b in content):
                return text_of(content)
    return ""
