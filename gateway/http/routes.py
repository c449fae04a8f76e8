"""HTTP handlers. They only translate: parse and validate, call the pipeline, serialise."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Match, Route

from gateway.config.tenants import Tenant
from gateway.errors import GatewayError
from gateway.http.anthropic import anthropic_error
from gateway.http.door import Door, client_disconnected, error_response, serve
from gateway.http.memory_api import memory_routes
from gateway.http.openapi import openapi
from gateway.pipeline.chat_request import ChatRequest, parse_chat_request

if TYPE_CHECKING:
    from gateway.http.state import Gateway

logger = logging.getLogger("gateway.routes")

READY_TIMEOUT_SECONDS = 2.0
"""A store that does not answer a PING in this time (hung, not just down) is not ready."""


def _gateway(request: Request) -> Gateway:
    return request.app.state.gateway


class ChatDoor(Door):
    """The chat completions door: the defaults of `Door`."""

    def parse(self, body: dict[str, Any], tenant: Tenant, request: Request) -> ChatRequest:
        return parse_chat_request(body, tenant.request_limits)


async def chat_completions(request: Request) -> Response:
    return await serve(request, ChatDoor())


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


async def openapi_json(request: Request) -> Response:
    return JSONResponse(openapi())


async def on_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error = GatewayError(exc.detail, status=exc.status_code, type="invalid_request_error",
                         code="not_found" if exc.status_code == 404 else "invalid_request")
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = _allowed_methods(request)
    return _in_dialect(request, error, headers)


def _in_dialect(request: Request, error: GatewayError,
                headers: dict[str, str] | None = None) -> Response:
    """An error outside a door's own handling in the shape of the door at its path: Anthropic's
    under /v1/messages, OpenAI's everywhere else."""
    if request.url.path.startswith("/v1/messages"):
        return anthropic_error(error, headers)
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
    return _in_dialect(request, exc)


async def on_client_disconnect(request: Request, exc: Exception) -> Response:
    """A client gone while a route read its body, at a route that does not name the tenant
    itself (the doors do: gateway/http/door.py)."""
    assert isinstance(exc, ClientDisconnect)
    return client_disconnected(request)


async def on_unexpected(request: Request, exc: Exception) -> Response:
    # The last line of defence: a bug must still answer in its door's shape, and be logged.
    logger.exception("unhandled error on %s %s", request.method, request.url.path)
    return _in_dialect(request, GatewayError("The gateway hit an internal error.",
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
