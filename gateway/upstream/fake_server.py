"""The fake upstream as a standalone HTTP server (`gateway fake-upstream`): OpenAI's chat
completions at `/v1/chat/completions`, Anthropic's Messages at `/v1/messages`.

The request body's `model` selects the behaviour (see `gateway.upstream.fake`, and
`gateway.upstream.fake_messages` for the Messages form). Errors are real HTTP errors with the
dialect's error body; chat streams are SSE ending with `data: [DONE]`, Messages streams
Anthropic's named events (`event: <type>`). Benchmarks
put a gateway in front of it, so a request does no more work than building its answer.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from gateway.upstream import fake_messages
from gateway.upstream.fake import (BEHAVIOURS, Behaviour, FakeModel, bad_request_body,
                                   behaviour_for, error_body, request_problem, stream_pause)


def create_fake_app() -> Starlette:
    model = FakeModel()
    model.count("")  # load the tokenizer now (~0.2 s), not during the first timed request

    async def chat_completions(request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except (ValueError, RecursionError):
            return _bad_request("The request body is not valid JSON.")
        if not isinstance(body, dict):
            return _bad_request("Expected a JSON object with a `messages` array.")
        problem = request_problem(body)
        if problem is not None:
            return _JSON(bad_request_body(*problem), status_code=400)
        behaviour = behaviour_for(str(body.get("model") or "echo"))
        return await _answer(behaviour, body, error_body, model.chunks, _sse, model.completion)

    anthropic = fake_messages.FakeMessages(model)

    async def messages(request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except (ValueError, RecursionError):
            body = None
        if not isinstance(body, dict):
            return _JSON(fake_messages.bad_request_body("The request body is not a JSON object."),
                         status_code=400)
        problem = fake_messages.request_problem(body)
        if problem is not None:
            return _JSON(fake_messages.bad_request_body(problem[0]), status_code=400)
        return await _answer(behaviour_for(body["model"]), body, fake_messages.error_body,
                             anthropic.events, _named_sse, anthropic.message)

    async def models(request: Request) -> Response:
        created = int(time.time())
        return _JSON({"object": "list", "data": [
            {"id": name, "object": "model", "created": created, "owned_by": "context-gateway-fake"}
            for name in BEHAVIOURS]})

    async def healthz(request: Request) -> Response:
        return _JSON({"status": "ok"})

    return Starlette(routes=[
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
    ])


def run_fake_upstream(host: str, port: int) -> None:
    """Serve the fake until interrupted (blocking)."""
    import uvicorn

    uvicorn.run(create_fake_app(), host=host, port=port, log_level="warning", access_log=False)


Build = Callable[[Behaviour, dict[str, Any]], Any]


async def _answer(behaviour: Behaviour, body: dict[str, Any],
                  error: Callable[[Behaviour], dict[str, Any]], stream: Build,
                  sse: Callable[[list[dict[str, Any]], float], AsyncIterator[bytes]],
                  answer: Build) -> Response:
    """The behaviour's answer in one dialect: its error, its stream (events spread over a
    slow behaviour's delay) or its whole answer (after the delay)."""
    if behaviour.kind == "error":
        return _JSON(error(behaviour), status_code=behaviour.status)
    if body.get("stream"):
        events = stream(behaviour, body)
        return StreamingResponse(sse(events, stream_pause(behaviour, len(events))),
                                 media_type="text/event-stream",
                                 headers={"cache-control": "no-cache"})
    if behaviour.delay:
        await asyncio.sleep(behaviour.delay)
    return _JSON(answer(behaviour, body))


async def _sse(chunks: list[dict[str, Any]], pause: float) -> AsyncIterator[bytes]:
    for chunk in chunks:
        if pause:
            await asyncio.sleep(pause)
        yield b"data: " + _dumps(chunk) + b"\n\n"
    yield b"data: [DONE]\n\n"


async def _named_sse(events: list[dict[str, Any]], pause: float) -> AsyncIterator[bytes]:
    for event in events:
        if pause:
            await asyncio.sleep(pause)
        yield b"event: " + event["type"].encode() + b"\ndata: " + _dumps(event) + b"\n\n"


class _JSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        return _dumps(content)


def _dumps(content: Any) -> bytes:
    """UTF-8 JSON; `\\u` escapes when the content holds a lone surrogate (echoed input)."""
    try:
        return json.dumps(content, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return json.dumps(content).encode()


def _bad_request(message: str) -> JSONResponse:
    return _JSON({"error": {"message": message, "type": "invalid_request_error",
                                   "param": None, "code": None}}, status_code=400)
