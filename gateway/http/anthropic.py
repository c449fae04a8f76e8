"""The Anthropic Messages door: `POST /v1/messages` and `/v1/messages/count_tokens`.

Handlers only translate: Anthropic's body to the chat request the pipeline runs (the same
reconcile, recall, rewrite and record as chat completions), its answer back in Anthropic's
shape, errors in Anthropic's error shape. The gateway key comes as `x-api-key` (what the
Anthropic SDK and Claude Code send) or `Authorization: Bearer`; `anthropic-version` and
`anthropic-beta` are accepted and not needed.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.config.tenants import Tenant
from gateway.core.dialects.anthropic import MessagesRequest
from gateway.core.dialects.anthropic_answer import anthropic_message, error_body
from gateway.core.text.tokens import count_messages
from gateway.errors import GatewayError, Unauthorized
from gateway.http.door import Door, UnicodeSafeJSON, client_disconnected, read_body, serve
from gateway.ops.observability import RequestLog
from gateway.pipeline.anthropic import AnthropicEncoder, error_message, parse_anthropic_request
from gateway.pipeline.chat_request import ChatRequest, parse_body
from gateway.pipeline.streams import StreamEncoder
from gateway.ports import NativeCompletion

if TYPE_CHECKING:
    from gateway.http.state import Gateway


class MessagesDoor(Door):
    """The Messages door: the key from `x-api-key` too, Anthropic's body, stream, answer and
    error shape; an Anthropic upstream's answer sent as it came (same-dialect pass-through)."""

    parsed: MessagesRequest

    def authorization(self, request: Request) -> str:
        return _authorization(request)

    def parse(self, body: dict[str, Any], tenant: Tenant, request: Request) -> ChatRequest:
        self.parsed, chat = parse_anthropic_request(body, tenant.request_limits,
                                                    request.headers)
        return chat

    def encoder(self, log: RequestLog) -> StreamEncoder:
        return AnthropicEncoder(self.parsed.model, log.tokens_forwarded or 0)

    def respond(self, answer: Any, headers: dict[str, str]) -> Response:
        if isinstance(answer, NativeCompletion):  # an Anthropic upstream's: its own bytes
            return Response(answer.payload, media_type="application/json", headers=headers)
        return UnicodeSafeJSON(anthropic_message(answer, self.parsed.model), headers=headers)

    def error(self, exc: GatewayError, headers: dict[str, str] | None = None) -> Response:
        return anthropic_error(exc, headers)


async def messages(request: Request) -> Response:
    return await serve(request, MessagesDoor())


async def count_tokens(request: Request) -> Response:
    """The prompt's tokens as the gateway counts them for the model's route (the client's own
    messages: what it would send before memory is added)."""
    gateway: Gateway = request.app.state.gateway
    tenant: Tenant | None = None
    try:
        tenant = gateway.tenants.authenticate(_authorization(request))
        body = parse_body(await read_body(request, gateway.config.server.max_body_bytes))
        # The Messages rules without the one field count_tokens does not take.
        _, chat = parse_anthropic_request({**body, "max_tokens": 1}, tenant.request_limits)
        route = tenant.route(chat.model)
        tokens = count_messages(chat.messages, gateway.pipeline.tokenizer_for(route.model))
        tools = chat.passthrough.get("tools")
        if tools:  # as the upstream gets them: JSON
            tokens += gateway.pipeline.tokenizer_for(route.model).count(json.dumps(tools))
    except ClientDisconnect:
        return client_disconnected(request, tenant.name if tenant else None)
    except GatewayError as exc:
        return anthropic_error(exc)
    return UnicodeSafeJSON({"input_tokens": tokens})


def anthropic_error(exc: GatewayError, headers: dict[str, str] | None = None) -> Response:
    return UnicodeSafeJSON(error_body(exc.status, error_message(exc)), status_code=exc.status,
                           headers={**(headers or {}), **exc.headers()})


def _authorization(request: Request) -> str:
    """The gateway key in the `Authorization` form, from `x-api-key` when that is sent; 401
    in Anthropic's words when neither header is."""
    key = request.headers.get("x-api-key")
    authorization = f"Bearer {key}" if key else request.headers.get("authorization")
    if not authorization:
        raise Unauthorized("x-api-key header is required.", code="missing_api_key")
    return authorization


anthropic_routes = [
    Route("/v1/messages", messages, methods=["POST"]),
    Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
]
