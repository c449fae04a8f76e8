"""The run every front door shares — chat completions (gateway/http/routes.py), Anthropic
Messages (gateway/http/anthropic.py), Responses (gateway/http/responses.py) — and the pieces of
it: a request's log, its body read under the size limit, its conversation and user.

`serve(request, door)`: authenticate the gateway key, read and parse the body (a large one
on a worker thread: gateway/pipeline/off_loop.py), name the conversation, run the pipeline
(prepare, then stream or complete), log the request once, and answer — a `GatewayError`
anywhere in its dialect's error shape. A `Door` says only what differs between dialects: where
the key comes from, how the body is parsed, how the conversation is named, how a stream is
written and an answer shaped.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, AsyncIterator

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from gateway.config.tenants import Tenant
from gateway.core.ids import ANONYMOUS_USER, ConversationKey, valid_id
from gateway.errors import BadRequest, GatewayError, PayloadTooLarge
from gateway.ops.logs import JsonMessage
from gateway.ops.observability import RequestLog, request_id, request_logger
from gateway.pipeline.chat_request import ChatRequest, parse_body
from gateway.pipeline.streams import StreamEncoder

if TYPE_CHECKING:
    from gateway.http.state import Gateway

CLIENT_CLOSED_REQUEST = 499
"""The status of a request whose client left before it was read (nginx's; never sent)."""


class Door:
    """One request at a door (a new one per request: it may keep what it parsed). The
    defaults are the chat completions door's."""

    def authorization(self, request: Request) -> str | None:
        """The gateway key in the `Authorization` form."""
        return request.headers.get("authorization")

    def parse(self, body: dict[str, Any], tenant: Tenant, request: Request) -> ChatRequest:
        raise NotImplementedError

    async def identify(self, request: Request, tenant: Tenant,
                       chat: ChatRequest) -> tuple[ConversationKey | None, bool]:
        """The conversation (None: the request passes through) and whether to persist."""
        return identity(request, tenant, chat)

    def encoder(self, log: RequestLog) -> StreamEncoder | None:
        """How a stream is written (None: chat completions chunks)."""
        return None

    def stream(self, events: AsyncIterator[bytes], key: ConversationKey | None,
               persist: bool) -> AsyncIterator[bytes]:
        return events

    async def answer(self, completion: dict[str, Any], key: ConversationKey | None,
                     persist: bool) -> Any:
        """What is sent for a completed answer (before the request is logged)."""
        return completion

    def respond(self, answer: Any, headers: dict[str, str]) -> Response:
        return UnicodeSafeJSON(answer, headers=headers)

    def error(self, exc: GatewayError, headers: dict[str, str] | None = None) -> Response:
        return error_response(exc, headers)


async def serve(request: Request, door: Door) -> Response:
    gateway: Gateway = request.app.state.gateway
    # Counted while served: a large request's steps yield to the others (off_loop.py).
    with gateway.pipeline.off_loop.serving():
        return await _serve(request, door, gateway)


async def _serve(request: Request, door: Door, gateway: Gateway) -> Response:
    log = request_log(request, gateway)
    try:
        tenant, key_digest = gateway.tenants.authenticate_key(door.authorization(request))
        log.tenant = tenant.name
        raw = await read_body(request, gateway.config.server.max_body_bytes)
        off_loop = gateway.pipeline.off_loop
        chat = await off_loop.run("parse", parsed, door, raw, tenant, request, True) \
            if off_loop.large_body(len(raw)) else parsed(door, raw, tenant, request)
        log.model, log.stream = chat.model, chat.stream
        key, persist = await door.identify(request, tenant, chat)
        log.user, log.conversation = (key.user, key.conversation) if key else (chat.user, None)
        prepared = await gateway.pipeline.prepare(
            chat, tenant, key, persist, log, gateway.limiter.limits_for(tenant.name, key_digest))
        if chat.stream:
            events = await gateway.pipeline.open_stream(prepared, log, door.encoder(log))
            return StreamingResponse(door.stream(events, key, persist),
                                     media_type="text/event-stream",
                                     headers={**log.headers(), "cache-control": "no-cache"})
        answer = await door.answer(await gateway.pipeline.complete(prepared, log), key, persist)
    except ClientDisconnect:
        return client_disconnected(request, log.tenant)
    except GatewayError as exc:
        log.status, log.error = exc.status, exc.message
        gateway.pipeline.finish(log)
        return door.error(exc, log.headers())
    gateway.pipeline.finish(log)
    return door.respond(answer, log.headers())


def parsed(door: Door, raw: bytes, tenant: Tenant, request: Request,
           in_pieces: bool = False) -> ChatRequest:
    """The body read as the door's request; `in_pieces` on a worker thread (a large body):
    the JSON a value at a time, so the loop thread can take the interpreter between them."""
    return door.parse(parse_body(raw, in_pieces=in_pieces), tenant, request)


def request_log(request: Request, gateway: Gateway) -> RequestLog:
    """The log of one request at any door: its id, and (tracing on) the client's trace."""
    log = RequestLog(request_id=request_id(request.headers))
    if gateway.pipeline.tracing is not None:
        log.traceparent = request.headers.get("traceparent")
    return log


def client_disconnected(request: Request, tenant: str | None = None) -> Response:
    """Log a client that closed its connection before its request was read — a normal event:
    one `client_disconnected` line, no traceback — and the response nobody will read."""
    request_logger.info(JsonMessage(
        event="client_disconnected", request_id=request_id(request.headers),
        method=request.method, path=request.url.path,
        **({"tenant": tenant} if tenant is not None else {})))
    return Response(status_code=CLIENT_CLOSED_REQUEST)


def identity(request: Request, tenant: Tenant,
             chat: ChatRequest) -> tuple[ConversationKey | None, bool]:
    names = tenant.headers
    conversation = request.headers.get(names.conversation_id) or chat.conversation_id
    user = request.headers.get(names.user_id) or chat.user
    for value, param in ((conversation, names.conversation_id), (user, names.user_id)):
        if value is not None and not valid_id(value):
            raise BadRequest(f"`{param}` must be 1-128 characters of letters, digits and "
                             "._@:+=- (starting with a letter or digit).", param=param,
                             code="invalid_id")
    persist = _flag(request.headers.get(names.persist), names.persist)
    if conversation is None:
        return None, persist
    return ConversationKey(tenant.name, user or ANONYMOUS_USER, conversation), persist


def _flag(value: str | None, name: str) -> bool:
    if value is None or value.strip().lower() in ("true", "1", "yes", "on"):
        return True
    if value.strip().lower() in ("false", "0", "no", "off"):
        return False
    raise BadRequest(f"`{name}` must be true or false.", param=name)


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"The request body is larger than {limit} bytes.")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        if not chunk:
            continue
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"The request body is larger than {limit} bytes.")
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)  # one copy at most


class UnicodeSafeJSON(JSONResponse):
    """Starlette's JSON response, but a lone surrogate in the content (an upstream may send
    one back as a \\u escape) is written as that escape instead of failing the response."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, allow_nan=False, separators=(",", ":")).encode()


def error_response(exc: GatewayError, headers: dict[str, str] | None = None) -> JSONResponse:
    return UnicodeSafeJSON(exc.body(), status_code=exc.status,
                           headers={**(headers or {}), **exc.headers()})
