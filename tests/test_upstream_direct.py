"""The direct path's own properties: SSE read in any cuts, the upstream's stream bytes reach the
client unchanged, a client that hangs up closes the upstream stream, connections are pooled.
(Its behaviour shared with litellm is in tests/test_upstream_litellm.py.)"""

from __future__ import annotations

import asyncio
import json
import threading

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from gateway.ports import UpstreamCall
from gateway.upstream.direct import DirectUpstream
from gateway.upstream.sse import data_payloads
from tests.support.gateway import KEYS, conversation_key, gateway_config, running_gateway
from tests.support.servers import serve

STREAM = (b": hello\r\n\r\ndata: {\"a\": 1}\r\n\r\nevent: x\nid: 7\ndata:{\"b\":\"\xc3\xa9\"}\n\n"
          b"data: line one\ndata: line two\n\ndata: [DONE]\n\n")
PAYLOADS = [b'{"a": 1}', b'{"b":"\xc3\xa9"}', b"line one\nline two", b"[DONE]"]


async def _pieces(data: bytes, cuts: list[int]):
    start = 0
    for cut in [*cuts, len(data)]:
        yield data[start:cut]
        start = cut


async def _payloads(data: bytes, cuts: list[int]) -> list[bytes]:
    return [p async for p in data_payloads(_pieces(data, cuts))]


async def test_sse_payloads_are_the_same_however_the_stream_is_cut():
    assert await _payloads(STREAM, []) == PAYLOADS
    for cut in range(1, len(STREAM)):
        assert await _payloads(STREAM, [cut]) == PAYLOADS, cut
    assert await _payloads(STREAM, list(range(1, len(STREAM)))) == PAYLOADS  # byte by byte


async def test_sse_event_cut_off_at_the_end_is_still_given():
    assert await _payloads(b"data: {\"a\": 1}\n\ndata: {\"b\": 2}", []) == \
        [b'{"a": 1}', b'{"b": 2}']


# --- through the gateway -----------------------------------------------------------------

EVENTS = [(b'{"id": "r1", "object": "chat.completion.chunk", "created": 1, "model": "raw",  '
           b'"choices": [{"index": 0, "delta": {"role": "assistant", "content": "caf\\u00e9 "}}]}'),
          ('{"id":"r1","object":"chat.completion.chunk","created":1,"model":"raw","choices":'
           '[{"index":0,"delta":{"content":"北京"},"finish_reason":"stop"}],"x_extra":null}'
           ).encode()]


class Upstream:
    """A loopback OpenAI-compatible upstream: `raw` streams EVENTS; `endless` streams until
    the client goes, and says when its stream was closed."""

    def __init__(self) -> None:
        self.closed = threading.Event()
        self.peers: set[object] = set()

    def app(self) -> Starlette:
        async def chat(request: Request) -> Response:
            self.peers.add(request.client)
            body = await request.json()
            if body["model"] == "endless":
                return StreamingResponse(self._endless(), media_type="text/event-stream")
            if not body.get("stream"):
                return Response(json.dumps({"id": "c", "object": "chat.completion", "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "ok"},
                     "finish_reason": "stop"}]}), media_type="application/json")
            chunks = [b"data: " + e + b"\n\n" for e in EVENTS] + [b"data: [DONE]\n\n"]
            return Response(b"".join(chunks), media_type="text/event-stream")

        return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])

    async def _endless(self):
        try:
            while True:
                yield b"data: " + EVENTS[0] + b"\n\n"
                await asyncio.sleep(0.02)
        finally:
            self.closed.set()


@pytest.fixture(scope="module")
def loopback():
    upstream = Upstream()
    with serve(upstream.app()) as url:
        upstream.url = url + "/v1"
        yield upstream


def _config(redis_url, base):
    return gateway_config(redis_url, models={m: {"model": f"openai/{m}", "api_base": base}
                                             for m in ("raw", "endless")})


def _post(client, url, model, conversation):
    return client.stream("POST", url + "/v1/chat/completions",
                         headers={"Authorization": f"Bearer {KEYS['acme']}",
                                  "X-Conversation-Id": conversation},
                         json={"model": model, "stream": True,
                               "messages": [{"role": "user", "content": "hi"}]})


async def test_the_client_gets_the_upstream_stream_bytes_unchanged(redis_url, loopback,
                                                                   redis_client):
    from gateway.store.redis_store import RedisStore

    with running_gateway(_config(redis_url, loopback.url)) as url, httpx.Client() as client, \
            _post(client, url, "raw", "raw-bytes") as response:
        body = response.read()
    assert response.status_code == 200
    assert body == b"".join(b"data: " + e + b"\n\n" for e in EVENTS) + b"data: [DONE]\n\n"
    stored = await RedisStore(redis_client).load(conversation_key("raw-bytes"))
    assert [s.message.text for s in stored] == ["hi", "café 北京"]


def test_a_client_that_hangs_up_closes_the_upstream_stream(redis_url, loopback):
    loopback.closed.clear()
    with running_gateway(_config(redis_url, loopback.url)) as url, httpx.Client() as client:
        with _post(client, url, "endless", "gone") as response:
            next(response.iter_bytes())
        assert loopback.closed.wait(5)


async def test_calls_share_pooled_connections(loopback):
    loopback.peers.clear()
    direct = DirectUpstream()
    call = UpstreamCall("openai/raw", {"messages": []}, api_base=loopback.url)
    try:
        for _ in range(3):
            await direct.complete(call)
            [c async for c in direct.stream(call)]
    finally:
        await direct.aclose()
    assert len(loopback.peers) == 1  # one connection: streams were read to their end

