"""The Anthropic Messages door's pipeline side: its body as a `ChatRequest`, and its stream
written in Anthropic's events (the translation itself is pure, in gateway/core/dialects/)."""

from __future__ import annotations

from typing import Any, Mapping

from gateway.config import RequestLimitsConfig
from gateway.core.dialects.anthropic import MessagesRequest, parse_messages_request
from gateway.core.dialects.anthropic_answer import resent_form
from gateway.core.dialects.anthropic_stream import MessagesStream
from gateway.core.dialects.events import sse
from gateway.errors import GatewayError, UpstreamError
from gateway.pipeline.chat_request import ChatRequest, check_lengths
from gateway.ports import StreamChunk, chunk_data


def parse_anthropic_request(body: dict[str, Any],
                            limits: RequestLimitsConfig) -> tuple[MessagesRequest, ChatRequest]:
    """The Messages body parsed, and as the chat request the pipeline runs (`BadRequest`
    naming the field at fault)."""
    parsed = parse_messages_request(body, max_messages=limits.max_messages)
    check_lengths(parsed.messages, limits.max_message_chars)
    return parsed, ChatRequest(model=parsed.model, messages=parsed.messages,
                               stream=parsed.stream, conversation_id=None, user=parsed.user,
                               passthrough=parsed.passthrough, one_shot=parsed.one_shot,
                               pinned=parsed.pinned, reply_form=resent_form)


def error_message(exc: GatewayError) -> str:
    """The error's message; an upstream's own, when it sent one."""
    error = exc.body().get("error")
    if isinstance(error, Mapping) and isinstance(error.get("message"), str):
        return error["message"]
    return exc.message


class AnthropicEncoder:
    """pipeline.StreamEncoder for the Messages stream."""

    def __init__(self, model: str, input_tokens: int) -> None:
        self._stream = MessagesStream(model, input_tokens)

    def start(self, first: Mapping[str, Any] | None) -> bytes:
        return _join(self._stream.start(first))

    def chunk(self, chunk: StreamChunk) -> bytes:
        return _join(self._stream.chunk(chunk_data(chunk)))

    def end(self) -> bytes:
        return _join(self._stream.end())

    def failure(self, exc: UpstreamError) -> bytes:
        return _join(self._stream.failure(exc.status, error_message(exc)))


def _join(events: list[dict[str, Any]]) -> bytes:
    return b"".join(sse(e) for e in events)
