"""The fake upstream as a standalone HTTP server (`gateway fake-upstream`): OpenAI's chat
completions at `/v1/chat/completions`, Anthropic's Messages at `/v1/messages`.

The request body's `model` selects the behaviour (see `gateway.upstream.fake`, and
`gateway.upstream.fake_messages` for the Messages form). Errors are real HTTP errors with the
dialect's error body; chat streams are SSE ending with `data: [DONE]`, Messages streams
Anthropic's named events (`event: <type>`). Benchmarks
put a gateway in front of it, so a request does no more work than building its answer.

Both forms hold requests to the providers' documented rules
(gateway/upstream/provider_rules.py) and answer a request that breaks one with the provider's
400.

The server keeps the requests it received, oldest first, the last 1,000:
`GET /fake/received` answers `{"requests": [{"path": "/v1/messages", "body": {...}}, ...]}`
(the path as requested; `"status"` added when the answer was not 200, e.g. 400 for a rejected request; a body that is
not JSON is kept as its text), `DELETE /fake/received` forgets them.
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
                                   behaviour_for, error_body, keep, request_problem,
                                   stream_pause)


def create_fake_app() -> Starlette:
    model = FakeModel()
    model.count("")  # load the tokenizer now, not during the first timed request
    received: list[dict[str, Any]] = []

    def rejected(path: str, body: Any, error: dict[str, Any]) -> Response:
        keep(received, path, body, 400)
        return _JSON(error, status_code=400)

    async def chat_completions(request: Request) -> Response:
        path, raw = request.url.path, await request.body()
        body = _parsed(raw)
        if body is None:
            return rejected(path, _text(raw), _bad_request("The request body is not valid "
                                                           "JSON."))
        if not isinstance(body, dict):
            return rejected(path, body, _bad_request("Expected a JSON object with a "
                                                     "`messages` array."))
        behaviour = behaviour_for(str(body.get("model") or "echo"))
        shape = request_problem(body)
        tokens, rule = (0, None) if shape is not None else model.problem(behaviour, body)
        problem = shape or rule
        if problem is not None:
            return rejected(path, body, bad_request_body(*problem))
        keep(received, path, body, behaviour.status)
        return await _answer(behaviour, body, error_body,
                             lambda b, d: model.chunks(b, d, tokens), _sse,
                             lambda b, d: model.completion(b, d, tokens))

    anthropic = fake_messages.FakeMessages(model)
    messages_path = fake_messages.MESSAGES_PATH

    async def messages(request: Request) -> Response:
        raw = await request.body()
        body = _parsed(raw)
        if not isinstance(body, dict):
            return rejected(messages_path, _text(raw) if body is None else body,
                            fake_messages.bad_request_body("The request body is not a JSON "
                                                           "object."))
        problem = fake_messages.request_problem(body)
        if problem is not None:
            return rejected(messages_path, body, fake_messages.bad_request_body(problem[0]))
        behaviour = behaviour_for(body["model"])
        tokens, rule = anthropic.problem(behaviour, body)
        if rule is not None:
            return rejected(messages_path, body, fake_messages.bad_request_body(rule))
        keep(received, messages_path, body, behaviour.status)
        return await _answer(behaviour, body, fake_messages.error_body,
                             lambda b, d: anthropic.events(b, d, tokens), _named_sse,
                             lambda b, d: anthropic.message(b, d, tokens))

    async def list_received(request: Request) -> Response:
        return _JSON({"requests": received})

    async def forget_received(request: Request) -> Response:
        received.clear()
        return _JSON({"requests": []})

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
        Route("/fake/received", list_received, methods=["GET"]),
        Route("/fake/received", forget_received, methods=["DELETE"]),
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


def _parsed(raw: bytes) -> Any:
    """The JSON of a request body, or None if it is not JSON."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _bad_request(message: str) -> dict[str, Any]:
    return bad_request_body(message, None)
