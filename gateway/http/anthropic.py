"""The Anthropic Messages door: `POST /v1/messages` and `/v1/messages/count_tokens`.

Handlers only translate: Anthropic's body to the chat request the pipeline runs (the same
reconcile, recall, rewrite and record as chat completions), its answer back in Anthropic's
shape, errors in Anthropic's error shape. The gateway key comes as `x-api-key` (what the
Anthropic SDK and Claude Code send) or `Authorization: Bearer`; `anthropic-version` and
`anthropic-beta` are accepted and not needed.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from gateway.config.tenants import Tenant
from gateway.core.dialects.anthropic_answer import anthropic_message, error_body
from gateway.core.text.tokens import count_messages
from gateway.errors import GatewayError
from gateway.http.routes import UnicodeSafeJSON, identity, read_body, request_log
from gateway.pipeline.anthropic import AnthropicEncoder, error_message, parse_anthropic_request
from gateway.pipeline.chat_request import parse_body
from gateway.ports import NativeCompletion

if TYPE_CHECKING:
    from gateway.http.state import Gateway


async def messages(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    log = request_log(request, gateway)
    try:
        tenant, key_digest = gateway.tenants.authenticate_key(_authorization(request))
        log.tenant = tenant.name
        raw = await read_body(request, gateway.config.server.max_body_bytes)
        parsed, chat = parse_anthropic_request(parse_body(raw), tenant.request_limits,
                                               request.headers)
        log.model, log.stream = chat.model, chat.stream
        key, persist = identity(request, tenant, chat)
        log.user, log.conversation = (key.user, key.conversation) if key else (chat.user, None)
        prepared = await gateway.pipeline.prepare(
            chat, tenant, key, persist, log, gateway.limiter.limits_for(tenant.name, key_digest))
        if chat.stream:
            encoder = AnthropicEncoder(parsed.model, log.tokens_forwarded or 0)
            events = await gateway.pipeline.open_stream(prepared, log, encoder)
            return StreamingResponse(events, media_type="text/event-stream",
                                     headers={**log.headers(), "cache-control": "no-cache"})
        answer = await gateway.pipeline.complete(prepared, log)
    except GatewayError as exc:
        log.status, log.error = exc.status, exc.message
        gateway.pipeline.finish(log)
        return anthropic_error(exc, log.headers())
    gateway.pipeline.finish(log)
    if isinstance(answer, NativeCompletion):  # an Anthropic upstream's: its own bytes
        return Response(answer.payload, media_type="application/json", headers=log.headers())
    return UnicodeSafeJSON(anthropic_message(answer, parsed.model), headers=log.headers())


async def count_tokens(request: Request) -> Response:
    """The prompt's tokens as the gateway counts them for the model's route (the client's own
    messages: what it would send before memory is added)."""
    gateway: Gateway = request.app.state.gateway
    try:
        tenant: Tenant = gateway.tenants.authenticate(_authorization(request))
        body = parse_body(await read_body(request, gateway.config.server.max_body_bytes))
        # The Messages rules without the one field count_tokens does not take.
        _, chat = parse_anthropic_request({**body, "max_tokens": 1}, tenant.request_limits)
        route = tenant.route(chat.model)
        tokens = count_messages(chat.messages, gateway.pipeline.tokenizer_for(route.model))
        tools = chat.passthrough.get("tools")
        if tools:  # as the upstream gets them: JSON
            tokens += gateway.pipeline.tokenizer_for(route.model).count(json.dumps(tools))
    except GatewayError as exc:
        return anthropic_error(exc)
    return UnicodeSafeJSON({"input_tokens": tokens})


def anthropic_error(exc: GatewayError, headers: dict[str, str] | None = None) -> Response:
    return UnicodeSafeJSON(error_body(exc.status, error_message(exc)), status_code=exc.status,
                           headers={**(headers or {}), **exc.headers()})


def _authorization(request: Request) -> str | None:
    """The gateway key in the `Authorization` form, from `x-api-key` when that is sent."""
    key = request.headers.get("x-api-key")
    return f"Bearer {key}" if key else request.headers.get("authorization")


anthropic_routes = [
    Route("/v1/messages", messages, methods=["POST"]),
    Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
]
