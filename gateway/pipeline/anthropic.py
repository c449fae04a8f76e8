"""The Anthropic Messages door's pipeline side: its body as a `ChatRequest` (carrying the body
itself, for an upstream that speaks Anthropic: gateway/upstream/direct_anthropic.py), and its
stream written in Anthropic's events — translated from the chat form (the translation itself
is pure, in gateway/core/dialects/), or passed through as an Anthropic upstream sent them."""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from gateway.config import RequestLimitsConfig
from gateway.core.dialects.anthropic import MessagesRequest, parse_messages_request
from gateway.core.dialects.anthropic_answer import resent_form
from gateway.core.dialects.anthropic_stream import MessagesStream
from gateway.core.dialects.events import sse
from gateway.errors import BadRequest, GatewayError, UpstreamError
from gateway.pipeline.chat_request import ChatRequest
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
    check_lengths(body, limits.max_message_chars)
    return parsed, ChatRequest(model=parsed.model, messages=parsed.messages,
                               stream=parsed.stream, conversation_id=None, user=parsed.user,
                               passthrough=parsed.passthrough, one_shot=parsed.one_shot,
                               pinned=parsed.pinned, reply_form=resent_form,
                               native=NativeRequest("anthropic", body, {
                                   name: headers[name] for name in PASSED_HEADERS
                                   if headers is not None and headers.get(name)}))


def check_lengths(body: dict[str, Any], max_chars: int) -> None:
    """`BadRequest` in Anthropic's wording, naming the field (`system`, `messages.3.content`,
    `messages.3.content.0.content` for a tool_result, which goes upstream as a message of its
    own) whose text is longer than the tenant's `request_limits.max_message_chars`. The body
    is parsed already: its shapes are valid."""
    for index, block, chars in _texts(body):
        if chars > max_chars:
            param = "system" if index is None else f"messages.{index}.content" + (
                "" if block is None else f".{block}.content")
            raise BadRequest(f"{param}: text too long: {chars} characters > {max_chars} "
                             "maximum.", param=param, code="string_above_max_length")


def _texts(body: dict[str, Any]) -> Iterator[tuple[int | None, int | None, int]]:
    """(the message's index, None for `system`; the tool_result block's index, None for the
    message's content; its characters). A field's name is written only for the one refused:
    a body holds thousands of messages."""
    yield None, None, _chars(body.get("system"))
    for i, message in enumerate(body["messages"]):
        content = message["content"]
        if type(content) is str:
            yield i, None, len(content)
        elif not isinstance(content, list):
            yield i, None, _chars(content)
        else:
            for j, block in enumerate(content):
                if block["type"] == "tool_result":
                    yield i, j, _chars(block.get("content"))
            yield i, None, _chars(content)


def _chars(content: Any) -> int:
    """Characters of a string, or of the text blocks of a list together."""
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(len(b["text"]) for b in content
                   if isinstance(b, Mapping) and b.get("type") == "text"
                   and isinstance(b.get("text"), str))
    return 0


IN_ANTHROPICS_WORDS = {"invalid_api_key": "invalid x-api-key"}
"""The gateway's own errors whose OpenAI wording names another field, by code, as Anthropic
words them (its key header is `x-api-key`)."""


def error_message(exc: GatewayError) -> str:
    """The error's message; an upstream's own, when it sent one."""
    if not isinstance(exc, UpstreamError) and exc.code in IN_ANTHROPICS_WORDS:
        return IN_ANTHROPICS_WORDS[exc.code]
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
