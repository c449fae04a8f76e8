"""OpenAI `chat.completion.chunk`s, translated as they pass into Anthropic's Messages stream.

The sequence a client gets (Anthropic's): `message_start`, `ping`, then per content block
`content_block_start`, its `content_block_delta`s and `content_block_stop` (blocks one after
another: thinking, text, tool_use), then `message_delta` (stop reason and the usage) and
`message_stop`. An upstream failure midway ends the stream with an `error` event.
"""

from __future__ import annotations

from typing import Any, Mapping

from gateway.core.dialects.anthropic_answer import error_body, message_id, stop_fields, usage
from gateway.core.dialects.events import ChunkTranslator, Event


class MessagesStream(ChunkTranslator):
    """One stream's translation state. `start()` first, `chunk()` per upstream chunk, then
    `end()` (the upstream finished) or `failure()` (it did not)."""

    def __init__(self, model: str, input_tokens: int) -> None:
        self.model = model
        self.input_tokens = input_tokens
        """The gateway's own count of what it forwarded, until the upstream's usage comes."""
        self._index = -1
        self._open: str | None = None
        """The kind of the block being streamed (None: no block open)."""
        self._tool_blocks: dict[int, int] = {}
        """OpenAI tool call index → the content block index it streams into."""
        self._finish: Any = None
        self._usage: Mapping[str, Any] | None = None
        self._id: Any = None

    def start(self, first: Mapping[str, Any] | None) -> list[Event]:
        self._id = (first or {}).get("id")
        message = {"id": message_id(self._id), "type": "message", "role": "assistant",
                   "model": self.model, "content": [], "stop_reason": None,
                   "stop_sequence": None,
                   "usage": {"input_tokens": self.input_tokens, "output_tokens": 0}}
        return [{"type": "message_start", "message": message}, {"type": "ping"}]

    def end(self) -> list[Event]:
        events = self._close()
        final = usage(self._usage) if self._usage is not None else \
            {"input_tokens": self.input_tokens, "output_tokens": 0}
        reason, sequence = stop_fields(self._finish, self._matched)
        events.append({"type": "message_delta",
                       "delta": {"stop_reason": reason, "stop_sequence": sequence},
                       "usage": final})
        events.append({"type": "message_stop"})
        return events

    def failure(self, status: int, message: str) -> list[Event]:
        return [error_body(status, message)]

    def _delta(self, delta: Mapping[str, Any]) -> list[Event]:
        events: list[Event] = []
        thinking = delta.get("reasoning_content")
        if isinstance(thinking, str) and thinking:
            events += self._into("thinking", {"type": "thinking", "thinking": ""})
            events.append(self._block_delta({"type": "thinking_delta", "thinking": thinking}))
        for block in delta.get("thinking_blocks") or []:
            signature = block.get("signature") if isinstance(block, Mapping) else None
            if isinstance(signature, str) and signature:
                events += self._into("thinking", {"type": "thinking", "thinking": ""})
                events.append(self._block_delta({"type": "signature_delta",
                                                 "signature": signature}))
        text = delta.get("content")
        if isinstance(text, str) and text:
            events += self._into("text", {"type": "text", "text": ""})
            events.append(self._block_delta({"type": "text_delta", "text": text}))
        for call in delta.get("tool_calls") or []:
            if isinstance(call, Mapping):
                events += self._tool_call(call)
        return events

    def _tool_call(self, call: Mapping[str, Any]) -> list[Event]:
        events: list[Event] = []
        slot = call.get("index", 0)
        function = call.get("function") if isinstance(call.get("function"), Mapping) else {}
        if slot not in self._tool_blocks:
            # A call's first fragment names it: a new tool_use block.
            events += self._close()
            events += self._open_block("tool_use", {"type": "tool_use", "id": call.get("id") or "",
                                                    "name": function.get("name") or "",
                                                    "input": {}})
            self._tool_blocks[slot] = self._index
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            events.append({"type": "content_block_delta", "index": self._tool_blocks[slot],
                           "delta": {"type": "input_json_delta", "partial_json": arguments}})
        return events

    def _into(self, kind: str, block: Event) -> list[Event]:
        """Events that make a block of `kind` the open one (none if it already is)."""
        if self._open == kind:
            return []
        return self._close() + self._open_block(kind, block)

    def _open_block(self, kind: str, block: Event) -> list[Event]:
        self._index += 1
        self._open = kind
        return [{"type": "content_block_start", "index": self._index, "content_block": block}]

    def _close(self) -> list[Event]:
        if self._open is None:
            return []
        self._open = None
        return [{"type": "content_block_stop", "index": self._index}]

    def _block_delta(self, delta: Event) -> Event:
        return {"type": "content_block_delta", "index": self._index, "delta": delta}

