"""The OpenAI Responses door: `POST /v1/responses` and `GET /v1/responses/{id}`.

Handlers only translate: the body to the chat request the pipeline runs (the same
reconcile, recall, rewrite and record as chat completions), the chain to its conversation
(gateway/pipeline/responses.py), the answer back as a `response`. Errors in OpenAI's shape.
`store: false` (or `X-Gateway-Persist: false`): neither the turn nor the response is kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from gateway.core.dialects.responses_answer import response_object
from gateway.core.ids import ANONYMOUS_USER
from gateway.errors import GatewayError, NotFound
from gateway.http.routes import UnicodeSafeJSON, error_response, identity, read_body, request_log
from gateway.pipeline.chat_request import parse_body
from gateway.pipeline.responses import ResponsesEncoder, new_response, parse_responses

if TYPE_CHECKING:
    from gateway.http.state import Gateway


async def create_response(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    chains = gateway.responses
    assert chains is not None  # built with the app
    log = request_log(request, gateway)
    try:
        tenant, key_digest = gateway.tenants.authenticate_key(request.headers.get("authorization"))
        log.tenant = tenant.name
        raw = await read_body(request, gateway.config.server.max_body_bytes)
        parsed, chat = parse_responses(parse_body(raw), tenant.request_limits)
        log.model, log.stream = chat.model, chat.stream
        named, persist = identity(request, tenant, chat)  # validates the id headers
        user = request.headers.get(tenant.headers.user_id) or chat.user
        response_id, created_at = new_response()
        key = await chains.key_for(tenant, parsed, response_id,
                                   named.conversation if named else None, user)
        persist = persist and parsed.store
        log.user, log.conversation = key.user, key.conversation
        prepared = await gateway.pipeline.prepare(
            chat, tenant, key, persist, log, gateway.limiter.limits_for(tenant.name, key_digest))
        if chat.stream:
            encoder = ResponsesEncoder(parsed, response_id, created_at)
            events = await gateway.pipeline.open_stream(prepared, log, encoder)
            body = chains.saved_before_the_end(events, encoder.stream, key if persist else None)
            return StreamingResponse(body, media_type="text/event-stream",
                                     headers={**log.headers(), "cache-control": "no-cache"})
        answer = await gateway.pipeline.complete(prepared, log)
        response = response_object(parsed, response_id, created_at, answer)
        if persist:
            await chains.save(key, response)
    except GatewayError as exc:
        log.status, log.error = exc.status, exc.message
        gateway.pipeline.finish(log)
        return error_response(exc, log.headers())
    gateway.pipeline.finish(log)
    return UnicodeSafeJSON(response, headers=log.headers())


async def get_response(request: Request) -> Response:
    """A stored response of the caller's tenant and user (no user named: the anonymous one)."""
    gateway: Gateway = request.app.state.gateway
    assert gateway.responses is not None
    tenant = gateway.tenants.authenticate(request.headers.get("authorization"))
    response_id = request.path_params["response_id"]
    found = await gateway.responses.log.find(tenant.name, response_id)
    user = request.headers.get(tenant.headers.user_id) or ANONYMOUS_USER
    if found is None or user != found.key.user:
        raise NotFound(f"Response with id '{response_id}' not found.", param="response_id")
    return UnicodeSafeJSON(found.response)


responses_routes = [
    Route("/v1/responses", create_response, methods=["POST"]),
    Route("/v1/responses/{response_id}", get_response, methods=["GET"]),
]
