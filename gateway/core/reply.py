"""The assistant's reply as a message to record, from a completion or from streamed chunks."""

from __future__ import annotations

from typing import Any, Mapping

from gateway.core.messages import Message


REASONING_FIELDS = ("thinking_blocks",)
"""Fields of a reply that only some dialects' clients send back (litellm's `thinking_blocks`:
Anthropic's thinking, which an Anthropic client resends with its history). Kept on the reply
taken from the upstream; `chat_form` drops them."""


def chat_form(reply: Message) -> Message:
    """The reply as a chat client sends it back (the form the chat door records): without
    `REASONING_FIELDS`, which chat clients do not resend."""
    if not any(k in REASONING_FIELDS for k, _ in reply.extra):
        return reply
    kept = {k: v for k, v in reply.to_openai().items() if k not in REASONING_FIELDS}
    return Message.from_openai(kept)


def reply_from_completion(response: Mapping[str, Any]) -> Message | None:
    """The first choice's message of a `chat.completion` (None if there is none), thinking
    blocks included (see `chat_form`)."""
    choices = response.get("choices") or []
    if not choices or not isinstance(choices[0], Mapping):
        return None
    message = choices[0].get("message")
    if not isinstance(message, Mapping):
        return None
    kept = {k: v for k, v in message.items()
            if v is not None and k in ("content", "tool_calls", "function_call", "name",
                                       "refusal", "audio", *REASONING_FIELDS)}
    return Message.from_openai({"role": "assistant", **kept})


class StreamAssembler:
    """Accumulates `chat.completion.chunk` deltas of the first choice into one message.

    Tool calls arrive as fragments keyed by `index`: the id, type and name come once, the
    arguments string in pieces; they are joined in index order. Thinking (litellm's
    `thinking_blocks` deltas) arrives likewise: its text in pieces, then its signature.
    """

    def __init__(self) -> None:
        self._text: list[str] = []
        self._thinking: list[dict[str, Any]] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.chunks = 0
        self.usage: Mapping[str, Any] | None = None
        """The stream's token usage, if the upstream sent it (`stream_options.include_usage`)."""

    def add(self, chunk: Mapping[str, Any]) -> None:
        self.chunks += 1
        usage = chunk.get("usage")
        if isinstance(usage, Mapping):
            self.usage = usage
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                self._text.append(delta["content"])
            for call in delta.get("tool_calls") or []:
                self._add_call(call)
            for block in delta.get("thinking_blocks") or []:
                if isinstance(block, Mapping):
                    self._add_thinking(block)

    def _add_thinking(self, fragment: Mapping[str, Any]) -> None:
        kind = fragment.get("type") or "thinking"
        if not self._thinking or self._thinking[-1]["type"] != kind \
                or "signature" in self._thinking[-1] or kind == "redacted_thinking":
            self._thinking.append({"type": kind})
        block = self._thinking[-1]
        for key, value in fragment.items():
            if key == "thinking" and isinstance(value, str):
                block["thinking"] = block.get("thinking", "") + value
            elif key != "type" and value is not None:
                block[key] = value

    def _add_call(self, fragment: Mapping[str, Any]) -> None:
        slot = self._calls.setdefault(int(fragment.get("index", 0)),
                                      {"id": None, "type": "function",
                                       "function": {"name": "", "arguments": ""}})
        if fragment.get("id"):
            slot["id"] = fragment["id"]
        if fragment.get("type"):
            slot["type"] = fragment["type"]
        function = fragment.get("function") or {}
        if function.get("name"):
            slot["function"]["name"] += function["name"]
        if function.get("arguments"):
            slot["function"]["arguments"] += function["arguments"]

    @property
    def complete(self) -> bool:
        return self.finish_reason is not None

    def message(self) -> Message | None:
        """The reply so far; None if nothing arrived."""
        if not self._text and not self._calls and not self._thinking:
            return None
        data: dict[str, Any] = {"role": "assistant", "content": "".join(self._text) or None}
        if self._calls:
            data["tool_calls"] = [self._calls[i] for i in sorted(self._calls)]
        if self._thinking:
            data["thinking_blocks"] = [dict(b) for b in self._thinking]
        return Message.from_openai(data)
