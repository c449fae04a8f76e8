"""HTTP handlers. They only translate: parse and validate, call the pipeline, serialise."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Match, Route

from gateway.config.tenants import Tenant
from gateway.core.ids import ANONYMOUS_USER, ConversationKey, valid_id
from gateway.errors import BadRequest, GatewayError, PayloadTooLarge
from gateway.http.memory_api import memory_routes
from gateway.http.openapi import openapi
from gateway.ops.observability import RequestLog, request_id
from gateway.pipeline.chat_request import ChatRequest, parse_body, parse_chat_request

if TYPE_CHECKING:
    from gateway.http.state import Gateway

logger = logging.getLogger("gateway.routes")

READY_TIMEOUT_SECONDS = 2.0
"""A store that does not answer a PING in this time (hung, not just down) is not ready."""


def _gateway(request: Request) -> Gateway:
    return request.app.state.gateway


def request_log(request: Request, gateway: Gateway) -> RequestLog:
    """The log of one request at any door: its id, and (tracing on) the client's trace."""
    log = RequestLog(request_id=request_id(request.headers))
    if gateway.pipeline.tracing is not None:
        log.traceparent = request.headers.get("traceparent")
    return log


async def chat_completions(request: Request) -> Response:
    gateway = _gateway(request)
    log = request_log(request, gateway)
    try:
        tenant, key_digest = gateway.tenants.authenticate_key(request.headers.get("authorization"))
        log.tenant = tenant.name
        raw = await read_body(request, gateway.config.server.max_body_bytes)
        chat = parse_chat_request(parse_body(raw), tenant.request_limits)
        log.model, log.stream = chat.model, chat.stream
        key, persist = identity(request, tenant, chat)
        log.user, log.conversation = (key.user, key.conversation) if key else (chat.user, None)
        prepared = await gateway.pipeline.prepare(
            chat, tenant, key, persist, log, gateway.limiter.limits_for(tenant.name, key_digest))
        if chat.stream:
            events = await gateway.pipeline.open_stream(prepared, log)
            return StreamingResponse(events, media_type="text/event-stream",
                                     headers={**log.headers(), "cache-control": "no-cache"})
        answer = await gateway.pipeline.complete(prepared, log)
    except GatewayError as exc:
        log.status, log.error = exc.status, exc.message
        gateway.pipeline.finish(log)
        return error_response(exc, log.headers())
    gateway.pipeline.finish(log)
    return UnicodeSafeJSON(answer, headers=log.headers())


async def list_models(request: Request) -> Response:
    tenant = _gateway(request).tenants.authenticate(request.headers.get("authorization"))
    return JSONResponse({"object": "list", "data": [
        {"id": alias, "object": "model", "created": 0, "owned_by": tenant.name}
        for alias in sorted(tenant.routes)]})


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """503 while the store cannot be reached (chat requests are still served, fail-open);
    the body says how many turns wait in this process's record buffer."""
    gateway = _gateway(request)
    held: dict[str, Any] = {}
    if gateway.buffer is not None:
        held["record_buffer"] = len(gateway.buffer)
    if gateway.store_pool is not None:  # saturation: requests wait for a store connection
        held["store_pool"] = gateway.store_pool.stats().as_dict()
    try:
        await asyncio.wait_for(gateway.store.ping(), READY_TIMEOUT_SECONDS)
    except Exception as exc:  # noqa: BLE001 — readiness reports any store failure
        return JSONResponse({"status": "unavailable", "store": repr(exc), **held},
                            status_code=503)
    return JSONResponse({"status": "ready", "store": "ok", **held})


async def metrics(request: Request) -> Response:
    gateway = _gateway(request)
    gateway.admin.check_metrics(request.headers.get("authorization"))
    gateway.refresh_metrics()
    await gateway.refresh_queue_metrics()
    return Response(generate_latest(gateway.metrics.registry), media_type=CONTENT_TYPE_LATEST)


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
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise PayloadTooLarge(f"The request body is larger than {limit} bytes.")
    return bytes(body)


class UnicodeSafeJSON(JSONResponse):
    """Starlette's JSON response, but a lone surrogate in the content (an upstream may send
    one back as a \\u escape) is written as that escape instead of failing the response."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, allow_nan=False, separators=(",", ":")).encode()


async def openapi_json(request: Request) -> Response:
    return JSONResponse(openapi())


def error_response(exc: GatewayError, headers: dict[str, str] | None = None) -> JSONResponse:
    return UnicodeSafeJSON(exc.body(), status_code=exc.status,
                           headers={**(headers or {}), **exc.headers()})


async def on_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error = GatewayError(exc.detail, status=exc.status_code, type="invalid_request_error",
                         code="not_found" if exc.status_code == 404 else "invalid_request")
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = _allowed_methods(request)
    return error_response(error, headers)


def _allowed_methods(request: Request) -> str:
    """Every method some route serves at this path (RFC 9110: a 405 names them in `Allow`).
    Starlette names only those of the first route that matched the path, and a path here may
    have a route per method."""
    methods: set[str] = set()
    for route in request.app.routes:
        if isinstance(route, Route) and route.matches(request.scope)[0] is not Match.NONE:
            methods.update(route.methods or ())
    return ", ".join(sorted(methods))


async def on_gateway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayError)
    return error_response(exc)


async def on_unexpected(request: Request, exc: Exception) -> Response:
    # The last line of defence: a bug must still answer in OpenAI's shape, and be logged.
    logger.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(GatewayError("The gateway hit an internal error.",
                                       code="internal_error"))


routes = [
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/models", list_models, methods=["GET"]),
    Route("/models", list_models, methods=["GET"]),
    Route("/healthz", healthz, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
    Route("/metrics", metrics, methods=["GET"]),
    Route("/openapi.json", openapi_json, methods=["GET"]),
    *memory_routes,
]
