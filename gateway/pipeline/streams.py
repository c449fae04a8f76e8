"""Writing a stream in the client's dialect: the chat completions stream (`ChatEncoder`, the
upstream's chunks as they came) or another door's (gateway/pipeline/anthropic.py,
gateway/pipeline/responses.py), behind one small interface the pipeline calls."""

from __future__ import annotations

import json
from typing import Any, Mapping, Protocol

from gateway.errors import UpstreamError
from gateway.ports import RawChunk, StreamChunk


class StreamEncoder(Protocol):
    """Writes a stream in a client's dialect: called with the first chunk (None: the upstream
    sent none) before any other, then per chunk, then once with `end` (the upstream finished)
    or `failure` (it failed midway). Each returns the bytes to send (b"": nothing)."""

    def start(self, first: Mapping[str, Any] | None) -> bytes: ...

    def chunk(self, chunk: StreamChunk) -> bytes: ...

    def end(self) -> bytes: ...

    def failure(self, exc: UpstreamError) -> bytes: ...


class ChatEncoder:
    """The chat completions stream: each chunk as the upstream sent it, then `[DONE]`."""

    def start(self, first: Mapping[str, Any] | None) -> bytes:
        return b""

    def chunk(self, chunk: StreamChunk) -> bytes:
        return _event(chunk)

    def end(self) -> bytes:
        return b"data: [DONE]\n\n"

    def failure(self, exc: UpstreamError) -> bytes:
        return _event(exc.body())


def _event(chunk: StreamChunk) -> bytes:
    """One SSE event: a raw chunk as the upstream sent it, a dict encoded."""
    if isinstance(chunk, RawChunk):
        return b"data: " + chunk.payload + b"\n\n"
    return b"data: " + json.dumps(chunk, ensure_ascii=False, separators=(",", ":")).encode() \
        + b"\n\n"
