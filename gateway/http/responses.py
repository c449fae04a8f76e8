"""The OpenAI Responses door: `POST /v1/responses` and `GET /v1/responses/{id}`.

Handlers only translate: the body to the chat request the pipeline runs (the same
reconcile, recall, rewrite and record as chat completions), the chain to its conversation
(gateway/pipeline/responses.py), the answer back as a `response`. Errors in OpenAI's shape.
`store: false` (or `X-Gateway-Persist: false`): neither the turn nor the response is kept.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, AsyncIterator

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.config.tenants import Tenant
from gateway.core.dialects.responses import ResponsesRequest
from gateway.core.dialects.responses_answer import response_object
from gateway.core.ids import ANONYMOUS_USER, ConversationKey
from gateway.errors import NotFound
from gateway.http.door import Door, UnicodeSafeJSON, identity, serve
from gateway.ops.observability import RequestLog
from gateway.pipeline.chat_request import ChatRequest
from gateway.pipeline.responses import (ResponseChains, ResponsesEncoder, new_response,
                                        parse_responses)
from gateway.pipeline.streams import StreamEncoder

if TYPE_CHECKING:
    from gateway.http.state import Gateway


class ResponsesDoor(Door):
    """The Responses door: the chain names the conversation (`previous_response_id`), the
    answer is a `response`, kept (unless `store: false`) so the chain can go on."""

    parsed: ResponsesRequest

    def __init__(self, chains: ResponseChains) -> None:
        self.chains = chains
        self.started_at = time.time()
        """When the request started: a response is not stored after an erase since then."""
        self.response_id, self.created_at = new_response()

    def parse(self, body: dict[str, Any], tenant: Tenant, request: Request) -> ChatRequest:
        self.parsed, chat = parse_responses(body, tenant.request_limits)
        return chat

    async def identify(self, request: Request, tenant: Tenant,
                       chat: ChatRequest) -> tuple[ConversationKey | None, bool]:
        named, persist = identity(request, tenant, chat)  # validates the id headers
        user = request.headers.get(tenant.headers.user_id) or chat.user
        key = await self.chains.key_for(tenant, self.parsed, self.response_id,
                                        named.conversation if named else None, user)
        return key, persist and self.parsed.store

    def encoder(self, log: RequestLog) -> StreamEncoder:
        self._encoder = ResponsesEncoder(self.parsed, self.response_id, self.created_at)
        return self._encoder

    def stream(self, events: AsyncIterator[bytes], key: ConversationKey | None,
               persist: bool) -> AsyncIterator[bytes]:
        return self.chains.saved_before_the_end(events, self._encoder.stream,
                                                key if persist else None, self.started_at)

    async def answer(self, completion: dict[str, Any], key: ConversationKey | None,
                     persist: bool) -> Any:
        response = response_object(self.parsed, self.response_id, self.created_at, completion)
        if persist and key is not None:
            await self.chains.save(key, response, self.started_at)
        return response


async def create_response(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    assert gateway.responses is not None  # built with the app
    return await serve(request, ResponsesDoor(gateway.responses))


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
