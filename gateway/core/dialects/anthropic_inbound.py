"""An Anthropic upstream's answer read in the gateway's chat form — a Messages `message` as a
`chat.completion`, its stream's events as `chat.completion.chunk`s — for what the pipeline
reads of every answer (the reply it records, the usage it counts). The client of a
same-dialect pass-through is sent the upstream's own bytes; this is only the pipeline's view.

The reply reads as litellm reads Claude's: text, `tool_calls`, `thinking_blocks`; stop reasons
as `finish_reason` (`stop_sequence` is `stop`, the sequence in the choice's `stop_reason`);
usage with the prompt's cached (`cache_read_input_tokens`) and cache-written tokens counted in
`prompt_tokens`, as OpenAI counts them, and kept under Anthropic's names too.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

FINISH_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop",
                  "max_tokens": "length", "tool_use": "tool_calls", "refusal": "content_filter"}
_THINKING = ("thinking", "redacted_thinking")


def completion_from_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A Messages API `message` as a `chat.completion`."""
    text, calls, thinking = [], [], []
    for block in message.get("content") or []:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            text.append(block["text"])
        elif kind == "tool_use":
            calls.append({"id": block.get("id") or "", "type": "function",
                          "function": {"name": block.get("name") or "",
                                       "arguments": json.dumps(block.get("input") or {},
                                                               ensure_ascii=False)}})
        elif kind in _THINKING:
            thinking.append(dict(block))
    reply: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        reply["tool_calls"] = calls
    if thinking:
        reply["thinking_blocks"] = thinking
    choice: dict[str, Any] = {"index": 0, "message": reply, "logprobs": None,
                              "finish_reason": finish_reason(message.get("stop_reason"))}
    if isinstance(message.get("stop_sequence"), str):
        choice["stop_reason"] = message["stop_sequence"]
    return {"id": message.get("id"), "object": "chat.completion", "model": message.get("model"),
            "choices": [choice], "usage": chat_usage(message.get("usage"))}


def finish_reason(stop_reason: Any) -> str | None:
    return FINISH_REASONS.get(stop_reason, "stop") if stop_reason else None


def chat_usage(usage: Any) -> dict[str, Any]:
    usage = usage if isinstance(usage, Mapping) else {}
    counts = {k: v for k, v in usage.items() if type(v) is int and v >= 0}
    read = counts.get("cache_read_input_tokens", 0)
    written = counts.get("cache_creation_input_tokens", 0)
    prompt = counts.get("input_tokens", 0) + read + written
    completion = counts.get("output_tokens", 0)
    out: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                           "total_tokens": prompt + completion}
    if read:
        out["prompt_tokens_details"] = {"cached_tokens": read}
        out["cache_read_input_tokens"] = read
    if written:
        out["cache_creation_input_tokens"] = written
    return out


class EventReader:
    """A Messages stream's events, one at a time, as `chat.completion.chunk`s (one per event;
    `choices` empty for events that say nothing of the reply). The usage comes with the
    `message_delta` (the input counted at `message_start`, the output at the end)."""

    def __init__(self) -> None:
        self._id: Any = None
        self._usage: dict[str, int] = {}
        self._calls: dict[int, int] = {}
        """Content block index → the tool call index it streams into."""

    def chunk(self, event: Mapping[str, Any]) -> dict[str, Any]:
        kind = event.get("type")
        delta: dict[str, Any] | None = None
        finish: str | None = None
        matched: Any = None
        usage = None
        if kind == "message_start" and isinstance(event.get("message"), Mapping):
            self._id = event["message"].get("id")
            self._count(event["message"].get("usage"))
            delta = {"role": "assistant", "content": ""}
        elif kind == "content_block_start" and isinstance(event.get("content_block"), Mapping):
            delta = self._start(event["content_block"], event.get("index"))
        elif kind == "content_block_delta" and isinstance(event.get("delta"), Mapping):
            delta = self._delta(event["delta"], event.get("index"))
        elif kind == "message_delta":
            self._count(event.get("usage"))
            said = event.get("delta") if isinstance(event.get("delta"), Mapping) else {}
            finish, matched = finish_reason(said.get("stop_reason")) or "stop", \
                said.get("stop_sequence")
            delta, usage = {}, chat_usage(self._usage)
        out: dict[str, Any] = {"id": self._id, "object": "chat.completion.chunk", "choices": []}
        if delta is not None:
            choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
            if isinstance(matched, str):
                choice["stop_reason"] = matched
            out["choices"] = [choice]
        if usage is not None:
            out["usage"] = usage
        return out

    def _count(self, usage: Any) -> None:
        if isinstance(usage, Mapping):
            self._usage.update((k, v) for k, v in usage.items() if type(v) is int and v >= 0)

    def _start(self, block: Mapping[str, Any], index: Any) -> dict[str, Any] | None:
        kind = block.get("type")
        if kind == "tool_use":
            slot = self._calls.setdefault(index, len(self._calls))
            return {"tool_calls": [{"index": slot, "id": block.get("id") or "",
                                    "type": "function",
                                    "function": {"name": block.get("name") or "",
                                                 "arguments": ""}}]}
        if kind == "redacted_thinking":
            return {"thinking_blocks": [dict(block)]}
        if kind == "text" and block.get("text"):
            return {"content": block["text"]}
        return None

    def _delta(self, delta: Mapping[str, Any], index: Any) -> dict[str, Any] | None:
        kind = delta.get("type")
        if kind == "text_delta" and isinstance(delta.get("text"), str):
            return {"content": delta["text"]}
        if kind == "input_json_delta" and index in self._calls:
            return {"tool_calls": [{"index": self._calls[index],
                                    "function": {"arguments": delta.get("partial_json") or ""}}]}
        if kind == "thinking_delta" and isinstance(delta.get("thinking"), str):
            return {"reasoning_content": delta["thinking"],
                    "thinking_blocks": [{"type": "thinking", "thinking": delta["thinking"]}]}
        if kind == "signature_delta" and isinstance(delta.get("signature"), str):
            return {"thinking_blocks": [{"type": "thinking",
                                         "signature": delta["signature"]}]}
        return None
