"""The direct path's own properties: SSE read in any cuts, the upstream's stream bytes reach the
client unchanged, a client that hangs up closes the upstream stream, connections are pooled, the
timeout is per read (not a total), a pooled connection the upstream dropped is retried once, a
gzip answer is decoded, a bad api_base is a 502.
(Its behaviour shared with litellm is in tests/integration/test_upstream_litellm.py.)"""

from __future__ import annotations

import asyncio
import gzip
import json
import threading

import httpx
import pytest
import respx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from gateway.errors import UpstreamError, UpstreamTimeout
from gateway.ports import UpstreamCall
from gateway.upstream.direct import DirectUpstream
from gateway.upstream.sse import data_payloads
from tests.support.gateway import KEYS, conversation_key, gateway_config, running_gateway
from tests.support.http_edge import http_edge
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


async def _trickle(gap: float):
    for _ in range(6):
        await asyncio.sleep(gap)
        yield b"data: " + EVENTS[0] + b"\n\n"
    yield b"data: [DONE]\n\n"


class Upstream:
    """A loopback OpenAI-compatible upstream: `raw` streams EVENTS; `endless` streams until
    the client goes, and says when its stream was closed; `trickle-<ms>` streams EVENTS[0]
    six times, <ms> apart; `gzip` answers gzip-encoded."""

    def __init__(self) -> None:
        self.closed = threading.Event()
        self.peers: set[object] = set()

    def app(self) -> Starlette:
        async def chat(request: Request) -> Response:
            self.peers.add(request.client)
            body = await request.json()
            if body["model"] == "endless":
                return StreamingResponse(self._endless(), media_type="text/event-stream")
            if body["model"].startswith("trickle-"):
                gap = int(body["model"][8:]) / 1000
                return StreamingResponse(_trickle(gap), media_type="text/event-stream")
            if body["model"] == "gzip":
                return Response(gzip.compress(json.dumps({"id": "z", "choices": []}).encode()),
                                media_type="application/json",
                                headers={"content-encoding": "gzip"})
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



async def _streamed(direct: DirectUpstream, call: UpstreamCall) -> list:
    return [c async for c in direct.stream(call)]


async def test_the_timeout_is_per_read_not_a_total(loopback):
    # 6 events 0.4 s apart: 2.4 s in all, over the 1.5 s timeout, never 1.5 s without a byte
    # (a margin a busy machine does not eat: a late gap would have to be ~4x longer).
    direct = DirectUpstream()
    try:
        chunks = await _streamed(direct, UpstreamCall(
            "openai/trickle-400", {"messages": []}, api_base=loopback.url, timeout=1.5))
        assert len(chunks) == 6
        with pytest.raises(UpstreamTimeout):  # one gap longer than the timeout
            await _streamed(direct, UpstreamCall(
                "openai/trickle-600", {"messages": []}, api_base=loopback.url, timeout=0.3))
    finally:
        await direct.aclose()


async def test_a_gzip_answer_is_decoded(loopback):
    direct = DirectUpstream()
    try:
        assert await direct.complete(UpstreamCall("openai/gzip", {"messages": []},
                                                  api_base=loopback.url)) \
            == {"id": "z", "choices": []}
    finally:
        await direct.aclose()


COMPLETION = {"id": "c", "object": "chat.completion", "choices": []}
DROPPED = httpx.RemoteProtocolError("Server disconnected without sending a response.")


@pytest.fixture
def edge():
    """respx routes answered over loopback; upstream.test resolves to it."""
    with http_edge() as served:
        served.router = respx.MockRouter(assert_all_called=True)
        yield served


async def _calls(edge, answers: list, count: int) -> list:
    route = edge.router.post("http://upstream.test/v1/chat/completions").mock(side_effect=answers)
    direct = DirectUpstream(resolver=edge.resolver("upstream.test"))
    call = UpstreamCall("openai/m", {"messages": []}, api_base="http://upstream.test/v1")
    results: list = []
    try:
        for _ in range(count):
            try:
                results.append(await direct.complete(call))
            except UpstreamError as exc:
                results.append(exc)
    finally:
        await direct.aclose()
    results.append(route.call_count)
    return results


async def test_a_pooled_connection_the_upstream_dropped_is_retried_once(edge):
    # The second call goes out on the first call's kept-alive connection, which the upstream
    # closes without answering (as an idle timeout racing the request does): it is sent again
    # on a new connection, and the caller sees only the answer.
    ok = httpx.Response(200, json=COMPLETION)
    assert await _calls(edge, [ok, DROPPED, ok], 2) == [COMPLETION, COMPLETION, 3]
    assert edge.connections == 2


async def test_an_upstream_that_drops_the_retry_too_is_a_502(edge):
    first, count = await _calls(edge, [DROPPED, DROPPED], 1)
    assert (first.status, first.code, count) == (502, "upstream_unreachable", 2)


@pytest.mark.parametrize("api_base", ["http://[::1/v1", "ftp://upstream.test/v1"])
async def test_a_bad_api_base_is_a_502(api_base):
    direct = DirectUpstream()
    try:
        with pytest.raises(UpstreamError) as caught:
            await direct.complete(UpstreamCall("openai/m", {"messages": []}, api_base=api_base))
    finally:
        await direct.aclose()
    assert (caught.value.status, caught.value.code) == (502, "upstream_unreachable")
