"""The Responses door's pipeline side: its body as a `ChatRequest`, the chain
(`previous_response_id` → the conversation it continues), the stream written in Responses
events, and the finished response stored for the next link of the chain.

A chain is a conversation: the first response of a chain starts one (the client's
X-Conversation-Id, else one named after the response), each next response continues it as a
stateful client does (only the new input is sent; the stored transcript brings the rest).
A chain continues from its newest response only: a `previous_response_id` naming an older
one is refused, never silently continued from the newest.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, AsyncIterator, Iterator, Mapping

import anyio

from gateway.config import RequestLimitsConfig
from gateway.config.tenants import Tenant
from gateway.core.dialects.events import sse
from gateway.core.dialects.responses import (ResponsesRequest, check_answers,
                                             parse_responses_request)
from gateway.core.dialects.responses_answer import asked_calls, resent_form, shell
from gateway.core.dialects.responses_stream import ResponsesStream
from gateway.core.ids import ANONYMOUS_USER, ConversationKey
from gateway.errors import BadRequest, NotFound, UpstreamError
from gateway.pipeline.chat_request import ChatRequest, too_long
from gateway.ports import StreamChunk, chunk_data
from gateway.store.responses import ResponseLog

logger = logging.getLogger("gateway.responses")


def parse_responses(body: dict[str, Any],
                    limits: RequestLimitsConfig) -> tuple[ResponsesRequest, ChatRequest]:
    parsed = parse_responses_request(body, max_messages=limits.max_messages)
    check_lengths(body, limits.max_message_chars)
    return parsed, ChatRequest(model=parsed.model, messages=parsed.messages,
                               stream=parsed.stream, conversation_id=None, user=parsed.user,
                               passthrough=parsed.passthrough, one_shot=parsed.one_shot,
                               pinned=parsed.pinned, reply_form=resent_form)


def check_lengths(body: dict[str, Any], max_chars: int) -> None:
    """`BadRequest` naming the Responses field (`instructions`, `input`, `input[3].content`,
    `input[3].output`) whose text is longer than the tenant's
    `request_limits.max_message_chars`. The body is parsed already: its shapes are valid."""
    for index, name, chars in _texts(body):
        if chars > max_chars:
            raise too_long(name if index is None else f"input[{index}].{name}", chars,
                           max_chars)


def _texts(body: dict[str, Any]) -> Iterator[tuple[int | None, str, int]]:
    """(the input item's index, None for a top-level field; the field; its characters). A
    field's name is written only for the one refused: a body holds hundreds of items."""
    yield None, "instructions", len(body.get("instructions") or "")
    items = body["input"]
    if isinstance(items, str):
        yield None, "input", len(items)
        return
    for i, item in enumerate(items):
        for name in ("content", "output"):  # a message's; a function_call_output's
            value = item.get(name)
            if type(value) is str:
                yield i, name, len(value)
            elif isinstance(value, list):
                yield i, name, sum(map(_part_chars, value))


def _part_chars(part: Any) -> int:
    """Characters of a content part's text (a refusal's too; none for an image)."""
    if type(part) is not dict and not isinstance(part, Mapping):
        return 0
    text = part.get("text") if part.get("type") != "refusal" else part.get("refusal")
    return len(text) if isinstance(text, str) else 0


def new_response() -> tuple[str, int]:
    """A fresh response id and its creation time (unix seconds)."""
    return "resp_" + uuid.uuid4().hex, int(time.time())


class ResponseChains:
    def __init__(self, log: ResponseLog) -> None:
        self.log = log

    async def key_for(self, tenant: Tenant, parsed: ResponsesRequest, response_id: str,
                      conversation: str | None, user: str | None) -> ConversationKey:
        """The conversation this response belongs to (`conversation`, `user`: the client's
        headers, validated). Unknown, expired, other tenants' and other users' previous ids
        are all "not found"; a client naming another conversation than its chain's is
        refused."""
        previous_id = parsed.previous_response_id
        if previous_id is None:
            check_answers(parsed, frozenset())
            return ConversationKey(tenant.name, user or ANONYMOUS_USER,
                                   conversation or "chain-" + response_id.removeprefix("resp_"))
        found = await self.log.find(tenant.name, previous_id)
        # Users are apart as at the other doors: a chain belongs to the user who started it
        # (no user named: the anonymous one), and nobody else continues it.
        if found is None or (user or ANONYMOUS_USER) != found.key.user:
            raise NotFound(f"Previous response with id '{previous_id}' not found.",
                           param="previous_response_id", code="previous_response_not_found")
        if conversation is not None and conversation != found.key.conversation:
            raise BadRequest(f"Previous response '{previous_id}' belongs to another "
                             f"conversation than `{conversation}`; send one of the two.",
                             param="previous_response_id")
        if not found.latest:
            raise BadRequest(f"Previous response '{previous_id}' is not the newest of its chain: "
                             "this gateway continues a chain from its newest response only "
                             "(to branch, send the history as `input` without "
                             "`previous_response_id`).", param="previous_response_id",
                             code="previous_response_not_latest")
        check_answers(parsed, asked_calls(found.response))
        return found.key

    async def save(self, key: ConversationKey, response: dict[str, Any],
                   started_at: float) -> None:
        """Store the response for the next link (`started_at`: when its request started; an
        erase or delete since then keeps it from being stored). A store that fails is logged,
        not raised (the client has its answer; only continuing from this id will not work)."""
        try:
            if not await self.log.save(key, response, started_at):
                logger.info("response %s not stored: its user was erased or its conversation "
                            "deleted while it was made", response.get("id"))
        except Exception as exc:  # noqa: BLE001 — fail open, logged
            logger.warning("could not store response %s: %r", response.get("id"), exc)

    async def saved_before_the_end(self, events: AsyncIterator[bytes], stream: ResponsesStream,
                                   key: ConversationKey | None,
                                   started_at: float) -> AsyncIterator[bytes]:
        """The stream, its last event (`response.completed`) held back until the turn is
        recorded and the response stored (`save`): a client that continues the chain the
        moment it reads that event must find it."""
        held: bytes | None = None
        try:
            async for data in events:
                if held is not None:
                    yield held
                held = data
        finally:
            with anyio.CancelScope(shield=True):
                await events.aclose()  # type: ignore[attr-defined]
        if key is not None and stream.response.get("status") in ("completed", "incomplete"):
            await self.save(key, stream.response, started_at)
        if held is not None:
            yield held


class ResponsesEncoder:
    """pipeline.StreamEncoder for the Responses stream."""

    def __init__(self, parsed: ResponsesRequest, response_id: str, created_at: int) -> None:
        self.stream = ResponsesStream(shell(parsed, response_id, created_at))

    def start(self, first: Mapping[str, Any] | None) -> bytes:
        return _join(self.stream.start(first))

    def chunk(self, chunk: StreamChunk) -> bytes:
        return _join(self.stream.chunk(chunk_data(chunk)))

    def end(self) -> bytes:
        return _join(self.stream.end())

    def failure(self, exc: UpstreamError) -> bytes:
        body = exc.body().get("error")
        error = body if isinstance(body, Mapping) else {}
        return _join(self.stream.failure(error.get("code") or exc.code,
                                         str(error.get("message") or exc.message)))


def _join(events: list[dict[str, Any]]) -> bytes:
    return b"".join(sse(e) for e in events)
