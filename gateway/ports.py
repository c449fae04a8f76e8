"""The small interfaces between the request path and the outside world.

The pipeline only talks to these; the app's lifespan builds the real adapters (Redis store,
litellm upstream, fake upstream) and tests may pass others. Anything that crosses a port is a
plain value: frozen core types in, OpenAI-shaped dicts out of the upstream (streamed chunks
optionally with the upstream's own bytes, to forward them unchanged).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Protocol, TypeAlias

from gateway.core.ids import ConversationKey
from gateway.core.messages import StoredMessage
from gateway.core.transcript import TurnRecord


class ConversationStore(Protocol):
    async def load(self, key: ConversationKey) -> tuple[StoredMessage, ...]:
        """The active branch of the transcript, including turns recorded but not yet applied."""
        ...

    async def record(self, key: ConversationKey, record: TurnRecord) -> str:
        """Durably enqueue a turn for the recorder; returns the job id. Raises if the store is
        unreachable (the caller logs it; the client's request has already been answered)."""
        ...

    async def ping(self) -> None:
        """Raise if the store cannot be reached."""
        ...


@dataclass(frozen=True, slots=True)
class NativeRequest:
    """The client's own request in its dialect, for an upstream that speaks that dialect too
    (same-dialect pass-through: gateway/upstream/direct_anthropic.py). Only the messages are
    taken from the call's (rewritten) body; every other field goes as the client sent it."""

    dialect: str
    """"anthropic" (the Messages door)."""
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    """The client's dialect headers to pass on (`anthropic-version`, `anthropic-beta`)."""


@dataclass(frozen=True, slots=True)
class UpstreamCall:
    """One chat completion call: the litellm model string and the OpenAI request body.

    `body` holds every request field but `model` — `messages` already rewritten, unknown
    fields (tools, response_format, temperature, ...) passed through untouched.
    """

    model: str
    body: dict[str, Any]
    api_base: str | None = None
    api_key: str | None = None
    timeout: float = 600.0
    extra: dict[str, Any] = field(default_factory=dict)
    """Further per-call litellm arguments from the tenant's model config (api_version, ...)."""
    native: NativeRequest | None = None
    """The client's request in its own dialect (a door that can pass it through sets it);
    an upstream of another dialect ignores it."""


@dataclass(frozen=True, slots=True)
class RawChunk:
    """A streamed `chat.completion.chunk` as the upstream sent it: `payload` is its SSE `data`
    (forwarded to the client byte for byte), `data` the same parsed (for the reply recorded).
    Neither is ever modified."""

    data: dict[str, Any]
    payload: bytes


@dataclass(frozen=True, slots=True)
class NativeChunk(RawChunk):
    """A streamed event of an upstream that speaks the client's dialect: `payload` is the
    whole event as the client is sent it, `data` the same as a `chat.completion.chunk`."""


class NativeCompletion(dict):  # type: ignore[type-arg]
    """A `chat.completion` (this dict) translated from an answer in the client's own dialect,
    whose bytes (`payload`) are sent to the client as the upstream sent them."""

    payload: bytes = b""


StreamChunk: TypeAlias = dict[str, Any] | RawChunk
"""A chunk dict (re-encoded when forwarded), or the upstream's raw chunk."""


def chunk_data(chunk: StreamChunk) -> dict[str, Any]:
    """The chunk as a `chat.completion.chunk` dict, whichever form it came in."""
    return chunk.data if isinstance(chunk, RawChunk) else chunk


class Upstream(Protocol):
    async def complete(self, call: UpstreamCall) -> dict[str, Any]:
        """A non-streaming completion as an OpenAI `chat.completion` dict.
        Raises gateway.errors.UpstreamError (status + OpenAI error body) on failure."""
        ...

    def stream(self, call: UpstreamCall) -> AsyncIterator[StreamChunk]:
        """Streaming completion: OpenAI `chat.completion.chunk`s, as dicts or RawChunks.
        Errors raise gateway.errors.UpstreamError — before the first chunk if the upstream
        refuses. The iterator may be closed early (`aclose`, a client that hung up)."""
        ...
