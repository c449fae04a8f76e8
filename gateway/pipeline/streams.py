"""Writing a stream in the client's dialect: the chat completions stream (`ChatEncoder`, the
upstream's chunks as they came) or another door's (gateway/pipeline/anthropic.py,
gateway/pipeline/responses.py), behind one small interface the pipeline calls."""

from __future__ import annotations

import json
from typing import Any, Mapping, Protocol

from gateway.errors import UpstreamError
from gateway.ports import RawChunk, StreamChunk, chunk_data


class StreamEncoder(Protocol):
    """Writes a stream in a client's dialect: called with the first chunk (None: the upstream
    sent none) before any other, then per chunk, then once with `end` (the upstream finished)
    or `failure` (it failed midway). Each returns the bytes to send (b"": nothing)."""

    def start(self, first: Mapping[str, Any] | None) -> bytes: ...

    def chunk(self, chunk: StreamChunk) -> bytes: ...

    def end(self) -> bytes: ...

    def failure(self, exc: UpstreamError) -> bytes: ...


class ChatEncoder:
    """The chat completions stream: each chunk as the upstream sent it, then `[DONE]`.

    `strip_usage`: the gateway asked for the usage (`stream_options.include_usage`), the client
    did not — the stream is given as it would have been without it: the usage chunk (no
    choices) is not sent, and the `"usage": null` OpenAI adds to every other chunk is taken
    out (from the upstream's own bytes when it is written as OpenAI writes it)."""

    def __init__(self, *, strip_usage: bool = False) -> None:
        self.strip_usage = strip_usage

    def start(self, first: Mapping[str, Any] | None) -> bytes:
        return b""

    def chunk(self, chunk: StreamChunk) -> bytes:
        if self.strip_usage:
            data = chunk_data(chunk)
            if "usage" in data:
                if not data.get("choices") and data["usage"] is not None:
                    return b""
                if data["usage"] is None:
                    return _without_null_usage(chunk)
        return _event(chunk)

    def end(self) -> bytes:
        return b"data: [DONE]\n\n"

    def failure(self, exc: UpstreamError) -> bytes:
        return _event(exc.body())


def _without_null_usage(chunk: StreamChunk) -> bytes:
    if isinstance(chunk, RawChunk):
        for written in (b',"usage":null', b'"usage":null,', b', "usage": null'):
            if chunk.payload.count(written) == 1:
                return b"data: " + chunk.payload.replace(written, b"") + b"\n\n"
    return _event({k: v for k, v in chunk_data(chunk).items() if k != "usage"})


def _event(chunk: StreamChunk) -> bytes:
    """One SSE event: a raw chunk as the upstream sent it, a dict encoded."""
    if isinstance(chunk, RawChunk):
        return b"data: " + chunk.payload + b"\n\n"
    return b"data: " + json.dumps(chunk, ensure_ascii=False, separators=(",", ":")).encode() \
        + b"\n\n"
