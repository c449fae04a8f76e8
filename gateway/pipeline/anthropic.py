"""The Anthropic Messages door's pipeline side: its body as a `ChatRequest` (carrying the body
itself, for an upstream that speaks Anthropic: gateway/upstream/direct_anthropic.py), and its
stream written in Anthropic's events — translated from the chat form (the translation itself
is pure, in gateway/core/dialects/), or passed through as an Anthropic upstream sent them."""

from __future__ import annotations

from typing import Any, Mapping

from gateway.config import RequestLimitsConfig
from gateway.core.dialects.anthropic import MessagesRequest, parse_messages_request
from gateway.core.dialects.anthropic_answer import resent_form
from gateway.core.dialects.anthropic_stream import MessagesStream
from gateway.core.dialects.events import sse
from gateway.errors import GatewayError, UpstreamError
from gateway.pipeline.chat_request import ChatRequest, check_lengths
from gateway.ports import NativeChunk, NativeRequest, StreamChunk, chunk_data


PASSED_HEADERS = ("anthropic-version", "anthropic-beta")
"""The client's headers an Anthropic upstream is sent again (same-dialect pass-through)."""


def parse_anthropic_request(body: dict[str, Any], limits: RequestLimitsConfig,
                            headers: Mapping[str, str] | None = None
                            ) -> tuple[MessagesRequest, ChatRequest]:
    """The Messages body parsed, and as the chat request the pipeline runs (`BadRequest`
    naming the field at fault). `headers`: the request's, of which `PASSED_HEADERS` go with
    the body to an Anthropic upstream."""
    parsed = parse_messages_request(body, max_messages=limits.max_messages)
    check_lengths(parsed.messages, limits.max_message_chars)
    return parsed, ChatRequest(model=parsed.model, messages=parsed.messages,
                               stream=parsed.stream, conversation_id=None, user=parsed.user,
                               passthrough=parsed.passthrough, one_shot=parsed.one_shot,
                               pinned=parsed.pinned, reply_form=resent_form,
                               native=NativeRequest("anthropic", body, {
                                   name: headers[name] for name in PASSED_HEADERS
                                   if headers is not None and headers.get(name)}))


def error_message(exc: GatewayError) -> str:
    """The error's message; an upstream's own, when it sent one."""
    error = exc.body().get("error")
    if isinstance(error, Mapping) and isinstance(error.get("message"), str):
        return error["message"]
    return exc.message


class AnthropicEncoder:
    """pipeline.StreamEncoder for the Messages stream: an Anthropic upstream's events
    (`NativeChunk`s) as it sent them; any other upstream's chunks translated."""

    def __init__(self, model: str, input_tokens: int) -> None:
        self._stream = MessagesStream(model, input_tokens)
        self._first: Mapping[str, Any] | None = None
        self._started = False
        self._native = False

    def start(self, first: Mapping[str, Any] | None) -> bytes:
        self._first = first  # written with the first chunk: it says if it is translated
        return b""

    def chunk(self, chunk: StreamChunk) -> bytes:
        if isinstance(chunk, NativeChunk):
            self._native = True
            return chunk.payload
        return self._head() + _join(self._stream.chunk(chunk_data(chunk)))

    def end(self) -> bytes:
        return b"" if self._native else self._head() + _join(self._stream.end())

    def failure(self, exc: UpstreamError) -> bytes:
        head = b"" if self._native else self._head()
        return head + _join(self._stream.failure(exc.status, error_message(exc)))

    def _head(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        return _join(self._stream.start(self._first))


def _join(events: list[dict[str, Any]]) -> bytes:
    return b"".join(sse(e) for e in events)
