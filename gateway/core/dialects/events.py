"""Server-sent events as the Anthropic and Responses streams write them, and the walk over
OpenAI chunks that both stream translations share."""

from __future__ import annotations

import json
from typing import Any, Mapping

Event = dict[str, Any]


def sse(event: dict[str, Any]) -> bytes:
    """One event: its `type` named on the `event:` line, then the data (compact JSON)."""
    return b"event: " + event["type"].encode() + b"\ndata: " + \
        json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


class ChunkTranslator:
    """The walk both stream translations share: each upstream chunk's usage and the first
    choice's finish reason are kept (`_usage`, `_finish`, with the stop sequence the choice
    names in `_matched`), and its delta is handed to `_delta`, which says what events it makes
    in the client's dialect."""

    _finish: Any = None
    _matched: Any = None
    _usage: Any = None

    def chunk(self, chunk: Mapping[str, Any]) -> list[Event]:
        if isinstance(chunk.get("usage"), Mapping):
            self._usage = chunk["usage"]
        events: list[Event] = []
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
                self._matched = choice.get("stop_reason")
            delta = choice.get("delta")
            if isinstance(delta, Mapping):
                events += self._delta(delta)
        return events

    def _delta(self, delta: Mapping[str, Any]) -> list[Event]:
        raise NotImplementedError
