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
- `agent` — a step of an agent's tool loop: one `tool_use` block calling the request's first
  tool with `{"step": <number of messages>}`, stop reason `tool_use`, its id derived from the
  messages; when the request enables `thinking`, a `thinking` block comes first (a short
  deterministic text and its valid `signature`). `echo` if the request sent no tools.
- `<name>-ctx<n>` — behaviour `<name>` with a context window of n tokens (default 200,000).

Requests are held to Anthropic's documented rules (gateway/upstream/provider_rules.py: the
first message is the user's, tool_use/tool_result pairing and order, non-empty text, at most 4
`cache_control` blocks, thinking signatures and the thinking block an open tool loop needs,
the prompt within the window); a request that breaks one gets Anthropic's 400
(`invalid_request_error`) in its wording, whatever the behaviour. Thinking blocks are signed by
`signature(thinking)`, which tests use to build valid blocks.

`stop_sequences`: an echoed text that holds one is cut before the first that occurs, with
stop reason `stop_sequence` and that sequence in `stop_sequence`, as Anthropic answers.
Streams are Anthropic's event sequence: `message_start`, then per block `content_block_start`
(the first followed by `ping`), its deltas (`text_delta`; `thinking_delta`s then one
`signature_delta`; `input_json_delta`), `content_block_stop`; then `message_delta` (stop
reason, usage), `message_stop`. Tokens are counted with cl100k (not Claude's tokenizer: the
counts are the fake's own) over the system prompt, every block's text (text, thinking, tool
names and inputs, tool results) and the tools' JSON.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Mapping

from gateway.core.dialects.anthropic_answer import error_body as anthropic_error_body
from gateway.upstream.fake import Behaviour, FakeModel, call_id, cut_at_stop, pieces, text_of
from gateway.upstream.provider_rules import ANTHROPIC_WINDOW, anthropic_problem, signature

MESSAGES_PATH = "/v1/messages"


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

    def input_tokens(self, body: Mapping[str, Any]) -> int:
        """The prompt's tokens as the fake counts them: the system prompt, per message 3 and
        the text of its blocks, the tools' JSON."""
        system = body.get("system")
        total = self._model.count(text_of(system)) if system else 0
        for message in body.get("messages") or []:
            total += 3 + self._model.count(_message_text(message.get("content")))
        tools = body.get("tools")
        if tools:
            total += self._model.count(json.dumps(tools, ensure_ascii=False))
        return total

    def problem(self, behaviour: Behaviour, body: Mapping[str, Any]) -> tuple[int, str | None]:
        """The prompt's tokens, and Anthropic's 400 message if `body` breaks one of its rules
        (provider_rules.anthropic_problem) or None. `body` passed `request_problem`."""
        tokens = self.input_tokens(body)
        return tokens, anthropic_problem(body, tokens, behaviour.window or ANTHROPIC_WINDOW)

    def message(self, behaviour: Behaviour, body: Mapping[str, Any],
                input_tokens: int | None = None) -> dict[str, Any]:
        """A Messages API `message`; the caller handles `error` behaviours (`error_body`)."""
        blocks, stop_reason, stop_sequence = self._reply(behaviour, body)
        return {"id": _new_id(), "type": "message", "role": "assistant",
                "model": f"fake/{behaviour.name}", "content": blocks,
                "stop_reason": stop_reason, "stop_sequence": stop_sequence,
                "usage": self._usage(body, blocks, behaviour.cached, input_tokens)}

    def events(self, behaviour: Behaviour, body: Mapping[str, Any],
               input_tokens: int | None = None) -> list[dict[str, Any]]:
        """The events of a streamed answer, in Anthropic's order."""
        blocks, stop_reason, stop_sequence = self._reply(behaviour, body)
        usage = self._usage(body, blocks, behaviour.cached, input_tokens)
        start = {**usage, "output_tokens": 1}  # Anthropic's message_start says 1 so far
        message = {"id": _new_id(), "type": "message", "role": "assistant",
                   "model": f"fake/{behaviour.name}", "content": [], "stop_reason": None,
                   "stop_sequence": None, "usage": start}
        events: list[dict[str, Any]] = [{"type": "message_start", "message": message}]
        for index, block in enumerate(blocks):
            opened, deltas = _streamed(block)
            events.append({"type": "content_block_start", "index": index,
                           "content_block": opened})
            if index == 0:
                events.append({"type": "ping"})
            events += [{"type": "content_block_delta", "index": index, "delta": d}
                       for d in deltas]
            events.append({"type": "content_block_stop", "index": index})
        return [*events,
                {"type": "message_delta",
                 "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                 "usage": {"output_tokens": usage["output_tokens"]}},
                {"type": "message_stop"}]

    def _reply(self, behaviour: Behaviour, body: Mapping[str, Any]
               ) -> tuple[list[dict[str, Any]], str, str | None]:
        """The content blocks, the stop reason and the matched stop sequence."""
        messages = body.get("messages") or []
        if behaviour.kind == "echo-messages":
            system = body.get("system")
            sent = ([{"role": "system", "content": system}] if system else []) + list(messages)
            return [{"type": "text", "text": json.dumps(sent, ensure_ascii=False)}], \
                "end_turn", None
        text = _last_user_text(messages)
        tools = body.get("tools") or []
        name = tools[0].get("name") if tools and isinstance(tools[0].get("name"), str) \
            else "echo"
        if behaviour.kind == "tool-call":
            return [{"type": "tool_use", "id": "toolu_fake_" + uuid.uuid4().hex[:20],
                     "name": name, "input": {"input": text}}], "tool_use", None
        if behaviour.kind == "agent" and tools:
            step = len(messages)
            call = {"type": "tool_use", "id": call_id(messages, "toolu_fake_"), "name": name,
                    "input": {"step": step}}
            thinking = body.get("thinking")
            if isinstance(thinking, Mapping) and thinking.get("type") == "enabled":
                thought = f"Step {step}: the next thing to do is to call {name}."
                return [{"type": "thinking", "thinking": thought,
                         "signature": signature(thought)}, call], "tool_use", None
            return [call], "tool_use", None
        text, matched = cut_at_stop(text, body.get("stop_sequences") or [])
        return [{"type": "text", "text": text}], \
            "end_turn" if matched is None else "stop_sequence", matched

    def _usage(self, body: Mapping[str, Any], blocks: list[dict[str, Any]], cached: int,
               input_tokens: int | None) -> dict[str, int]:
        total = self.input_tokens(body) if input_tokens is None else input_tokens
        usage = {"input_tokens": total, "output_tokens": self._model.count(_message_text(blocks))}
        if cached:
            read = min(cached, total)
            usage.update(input_tokens=total - read, cache_read_input_tokens=read)
        return usage


def _streamed(block: Mapping[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A block as its `content_block_start` shows it, and its deltas."""
    if block["type"] == "text":
        return {"type": "text", "text": ""}, \
            [{"type": "text_delta", "text": p} for p in pieces(block["text"])]
    if block["type"] == "thinking":
        return {"type": "thinking", "thinking": "", "signature": ""}, \
            [*({"type": "thinking_delta", "thinking": p} for p in pieces(block["thinking"])),
             {"type": "signature_delta", "signature": block["signature"]}]
    return {**block, "input": {}}, \
        [{"type": "input_json_delta", "partial_json": p}
         for p in pieces(json.dumps(block["input"], ensure_ascii=False))]


def _message_text(content: Any) -> str:
    """The text the fake counts in a message's content: text and thinking, tool names and
    inputs, tool results' content."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            parts.append(block["thinking"])
        elif kind == "tool_use":
            parts += [str(block.get("name") or ""),
                      json.dumps(block.get("input"), ensure_ascii=False)]
        elif kind == "tool_result":
            parts.append(_message_text(block.get("content")))
    return "\n".join(p for p in parts if p)


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
