"""Both ways to a real upstream — DirectUpstream (the pooled HTTP client) and LitellmUpstream —
through the same cases: the request reaches the upstream untouched, the answer comes back in
OpenAI's shape, upstream errors keep their status and body, timeouts are 504s, an upstream
not reached is a 502 retried once, streams refuse before their first chunk.

respx mocks the HTTP edge (conftest sets DISABLE_AIOHTTP_TRANSPORT so litellm goes through
httpx); the direct path's aiohttp session gets the same routes' answers over real loopback HTTP
(tests/support/http_edge.py). The last tests talk to the standalone fake server.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import time

import httpx
import pytest
import respx

from gateway.errors import UpstreamError, UpstreamTimeout
from gateway.ports import RawChunk, UpstreamCall, chunk_data
from gateway.upstream.direct import DirectUpstream
from gateway.upstream.fake_server import create_fake_app
from gateway.upstream.litellm_upstream import LitellmUpstream
from tests.support.http_edge import Edge, http_edge
from tests.support.servers import closed_port, serve

BASE = "http://upstream.test/v1"
URL = f"{BASE}/chat/completions"
MESSAGES = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hello there"}]
COMPLETION = {
    "id": "chatcmpl-abc", "object": "chat.completion", "created": 1700000000,
    "model": "gpt-4o-mini-2024-07-18", "system_fingerprint": "fp_1", "service_tier": "default",
    "choices": [{"index": 0, "logprobs": None, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "Hi!", "refusal": None,
                             "annotations": []}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14},
}


def sse(*chunks: dict) -> str:
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"


def chunk(delta: dict, finish_reason: str | None = None, **extra) -> dict:
    return {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1700000000,
            "model": "gpt-4o-mini", "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                                "finish_reason": finish_reason}], **extra}


STREAM = sse(chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"}),
             chunk({"content": "lo, "}), chunk({"content": "world"}), chunk({}, "stop"))


def call(model: str = "openai/gpt-4o-mini", api_base: str = BASE, **body) -> UpstreamCall:
    return UpstreamCall(model=model, body={"messages": MESSAGES, **body}, api_base=api_base,
                        api_key="sk-tenant", timeout=10)


@pytest.fixture(scope="module")
def litellm_upstream() -> LitellmUpstream:
    return LitellmUpstream()


@pytest.fixture(scope="module")
def edge():
    with http_edge() as served:
        yield served


def direct_upstream(edge: Edge) -> DirectUpstream:
    """The direct path, its requests to upstream.test answered by the `mock` routes."""
    return DirectUpstream(resolver=edge.resolver("upstream.test"))


@pytest.fixture(params=["direct", "litellm"])
async def upstream(request, litellm_upstream, edge):
    """Each case runs through both paths a call to an OpenAI-compatible upstream may take."""
    if request.param == "litellm":
        yield litellm_upstream
        return
    direct = direct_upstream(edge)
    yield direct
    await direct.aclose()


async def chunks_of(stream) -> list[dict]:
    return [chunk_data(c) async for c in stream]


@pytest.fixture
def mock(edge):
    with respx.mock(assert_all_called=True) as router:
        edge.router = router
        yield router


def sent_body(route) -> dict:
    return json.loads(route.calls.last.request.content)


async def test_complete_returns_openai_chat_completion(upstream, mock):
    mock.post(URL).respond(200, json=COMPLETION)
    result = await upstream.complete(call())
    assert result["object"] == "chat.completion"
    assert result["id"] == "chatcmpl-abc" and result["model"] == "gpt-4o-mini-2024-07-18"
    assert result["system_fingerprint"] == "fp_1"
    [choice] = result["choices"]
    assert (choice["index"], choice["logprobs"], choice["finish_reason"]) == (0, None, "stop")
    # litellm drops the message's null fields (`refusal`); the direct path keeps every byte
    assert without_nulls(choice["message"]) == {"role": "assistant", "content": "Hi!",
                                                "annotations": []}
    assert result["usage"] == {"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14}
    json.dumps(result)  # what the client receives is plain JSON
    assert not {"provider_specific_fields", "citations", "moderation"} & set(result)


def without_nulls(message: dict) -> dict:
    return {k: v for k, v in message.items() if v is not None}


async def test_direct_path_returns_the_upstream_answer_unchanged(mock, edge):
    answer = {**COMPLETION, "x_vendor": {"kept": [1, None]}, "choices": [
        {**COMPLETION["choices"][0], "x_choice_extra": "é"}]}
    mock.post(URL).respond(200, json=answer)
    direct = direct_upstream(edge)
    try:
        assert await direct.complete(call()) == answer
    finally:
        await direct.aclose()


async def test_tool_call_reply_keeps_null_content_and_tool_calls(upstream, mock):
    tool_call = {"id": "call_1", "type": "function",
                 "function": {"name": "lookup", "arguments": "{\"q\": \"x\"}"}}
    reply = copy.deepcopy(COMPLETION)
    reply["choices"][0].update(finish_reason="tool_calls", message={
        "role": "assistant", "content": None, "tool_calls": [tool_call]})
    mock.post(URL).respond(200, json=reply)
    message = (await upstream.complete(call()))["choices"][0]["message"]
    assert message["content"] is None
    assert message["tool_calls"] == [tool_call]


async def test_every_request_field_reaches_the_upstream_untouched(upstream, mock):
    route = mock.post(URL).respond(200, json=COMPLETION)
    body = {
        "messages": [
            {"role": "system", "content": "s", "cache_control": {"type": "ephemeral"}},
            {"role": "user", "name": "bob",
             "content": [{"type": "image_url", "image_url": "http://x/y.png"},
                         {"type": "text", "text": "what is it?"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "r"},
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"a": {"type": "string", "pattern": r"\p{L}+"}}}}}],
        "tool_choice": {"type": "auto"}, "parallel_tool_calls": False,
        "response_format": {"type": "json_object"}, "temperature": 0.3, "top_p": 0.9,
        "max_tokens": 50, "max_completion_tokens": 60, "stop": ["a", "b", "c", "d", "e"],
        "seed": 7, "n": 1, "logprobs": True, "top_logprobs": 2, "user": "end-user-1",
        "presence_penalty": 0.1, "frequency_penalty": 0.2, "logit_bias": {"50256": -100},
        "metadata": {"trace": "t-1"}, "store": True, "service_tier": "auto",
        "reasoning_effort": "low", "verbosity": "low", "thinking": {"type": "enabled"},
        "top_k": 40, "x_vendor_option": {"nested": [1, 2, {"deep": None}]},
        "extra_body": {"from": "client"},
    }
    sent_by_client = copy.deepcopy(body)
    await upstream.complete(UpstreamCall(model="openai/gpt-4o-mini", body=body, api_base=BASE,
                                         api_key="sk-tenant"))
    assert sent_body(route) == {"model": "gpt-4o-mini", **sent_by_client}
    assert body == sent_by_client  # the caller's body is not mutated


async def test_fields_named_like_litellm_options_are_sent_not_obeyed(upstream, mock):
    route = mock.post(URL).respond(200, json=COMPLETION)
    sneaky = {"api_base": "http://evil.test/v1", "api_key": "sk-evil", "mock_response": "pwned",
              "timeout": 0.001, "num_retries": 9, "custom_llm_provider": "anthropic"}
    result = await upstream.complete(UpstreamCall(
        model="openai/gpt-4o-mini", body={"messages": MESSAGES, **sneaky}, api_base=BASE,
        api_key="sk-tenant"))
    assert result["choices"][0]["message"]["content"] == "Hi!"
    assert route.calls.last.request.headers["authorization"] == "Bearer sk-tenant"
    assert sent_body(route) == {"model": "gpt-4o-mini", "messages": MESSAGES, **sneaky}
    assert route.call_count == 1


async def test_api_key_is_sent_as_bearer(upstream, mock):
    route = mock.post(URL).respond(200, json=COMPLETION)
    await upstream.complete(call())
    assert route.calls.last.request.headers["authorization"] == "Bearer sk-tenant"


async def test_stream_chunks_assemble_to_the_upstream_text(upstream, mock):
    route = mock.post(URL).respond(200, text=STREAM, headers={"content-type": "text/event-stream"})
    chunks = await chunks_of(upstream.stream(call(stream=True, x_vendor_option=1)))
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == "chatcmpl-s"
               for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) \
        == "Hello, world"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all(None not in c["choices"][0]["delta"].values() for c in chunks)
    assert sent_body(route) == {"model": "gpt-4o-mini", "messages": MESSAGES, "stream": True,
                                "x_vendor_option": 1}


async def test_stream_false_in_the_body_is_not_sent(upstream, mock):
    route = mock.post(URL).respond(200, json=COMPLETION)
    await upstream.complete(call(stream=False, stream_options=None))
    assert sent_body(route) == {"model": "gpt-4o-mini", "messages": MESSAGES,
                                "stream_options": None}


async def test_direct_path_forwards_the_upstream_stream_bytes_as_they_are(mock, edge):
    # Spacing, key order and escapes as the upstream chose them; comments and CRLFs skipped.
    events = [(b'{"id": "s1", "object": "chat.completion.chunk", "choices": '
               b'[{"index": 0, "delta": {"role": "assistant", "content": "caf\\u00e9 "}}]}'),
              ('{"id":"s1","object":"chat.completion.chunk","choices":[{"index":0,'
               '"delta":{"content":"北京"},"finish_reason":"stop"}]}').encode()]
    body = (b": keep-alive\r\n\r\ndata: " + events[0] + b"\r\n\r\ndata:" + events[1]
            + b"\n\ndata: [DONE]\n\n")
    mock.post(URL).respond(200, content=body, headers={"content-type": "text/event-stream"})
    direct = direct_upstream(edge)
    try:
        chunks = [c async for c in direct.stream(call(stream=True))]
    finally:
        await direct.aclose()
    assert all(isinstance(c, RawChunk) for c in chunks)
    assert [c.payload for c in chunks] == events
    assert [c.data for c in chunks] == [json.loads(e) for e in events]


async def test_stream_usage_chunk_has_no_choices_like_openai(upstream, mock):
    usage = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    stream = sse(chunk({"role": "assistant", "content": "Hi"}), chunk({}, "stop"),
                 {**chunk({}), "choices": [], "usage": usage})
    route = mock.post(URL).respond(200, text=stream, headers={"content-type": "text/event-stream"})
    options = {"include_usage": True}
    chunks = await chunks_of(upstream.stream(call(stream=True, stream_options=options)))
    assert sent_body(route)["stream_options"] == options
    assert chunks[-1]["choices"] == []
    assert {k: chunks[-1]["usage"][k] for k in usage} == usage


@pytest.mark.parametrize("status, error", [
    (429, {"message": "Rate limit reached for gpt-4o-mini", "type": "requests", "param": None,
           "code": "rate_limit_exceeded"}),
    # litellm would re-label this 400 a 429 because its message mentions a rate limit
    (400, {"message": "Invalid value for 'n': rate limit of choices exceeded",
           "type": "invalid_request_error", "param": "n", "code": "invalid_value"}),
    (500, {"message": "The server had an error", "type": "server_error", "param": None,
           "code": None}),
    (503, {"message": "Overloaded", "type": "server_error", "param": None, "code": None}),
])
async def test_upstream_error_keeps_status_and_body(upstream, mock, status, error):
    route = mock.post(URL).respond(status, json={"error": error})
    with pytest.raises(UpstreamError) as caught:
        await upstream.complete(call())
    assert caught.value.status == status
    assert caught.value.body() == {"error": error}
    assert route.call_count == 1  # no retries behind the client's back


async def test_upstream_error_without_openai_body_keeps_status(upstream, mock):
    mock.post(URL).respond(502, text="<html>bad gateway</html>")
    with pytest.raises(UpstreamError) as caught:
        await upstream.complete(call())
    assert caught.value.status == 502
    assert caught.value.upstream_body is None


async def test_timeout_becomes_504(upstream, mock):
    mock.post(URL).mock(side_effect=httpx.ReadTimeout("too slow"))
    with pytest.raises(UpstreamTimeout) as caught:
        await upstream.complete(dataclasses.replace(call(), timeout=0.3))
    assert caught.value.status == 504


async def test_unreachable_upstream_becomes_502(upstream):
    unreachable = call(api_base=f"http://127.0.0.1:{closed_port()}/v1")
    with pytest.raises(UpstreamError) as caught:
        await upstream.complete(unreachable)
    assert caught.value.status == 502 and not isinstance(caught.value, UpstreamTimeout)
    with pytest.raises(UpstreamError) as caught:
        await anext(upstream.stream(unreachable))
    assert caught.value.status == 502


async def test_a_connection_that_fails_once_is_retried_once(upstream, mock):
    route = mock.post(URL).mock(side_effect=[
        httpx.RemoteProtocolError("Server disconnected without sending a response."),
        httpx.Response(200, json=COMPLETION)])
    result = await upstream.complete(call())
    assert result["choices"][0]["message"]["content"] == "Hi!"
    assert route.call_count == 2


async def test_an_upstream_error_answer_is_never_retried(upstream, mock):
    route = mock.post(URL).mock(
        return_value=httpx.Response(500, json={"error": {"message": "boom", "type": "server"}}))
    with pytest.raises(UpstreamError):
        await upstream.complete(call())
    assert route.call_count == 1


async def test_stream_refused_by_upstream_raises_on_first_chunk(upstream, mock):
    error = {"message": "boom", "type": "server_error", "param": None, "code": None}
    mock.post(URL).respond(500, json={"error": error})
    chunks = upstream.stream(call(stream=True))
    with pytest.raises(UpstreamError) as caught:
        await anext(chunks)
    assert caught.value.status == 500
    assert caught.value.body() == {"error": error}


async def test_stream_failing_midway_raises_from_iteration(upstream, mock):
    class Broken(httpx.AsyncByteStream):
        async def __aiter__(self):
            yield f"data: {json.dumps(chunk({'role': 'assistant', 'content': 'Hel'}))}\n\n".encode()
            raise httpx.ReadError("connection reset")

    mock.post(URL).mock(return_value=httpx.Response(
        200, stream=Broken(), headers={"content-type": "text/event-stream"}))
    received = []
    with pytest.raises(UpstreamError):
        async for c in upstream.stream(call(stream=True)):
            received.append(chunk_data(c))
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in received) == "Hel"


async def test_translated_providers_get_fields_as_arguments_but_never_litellm_options(
        litellm_upstream, mock):
    # Providers other than `openai` go through litellm's translation (here hosted_vllm, an
    # OpenAI-compatible one): OpenAI parameters and unknown fields arrive; a field named like
    # a litellm option is neither obeyed nor sent (litellm would take it as its own).
    route = mock.post("http://vllm.test/v1/chat/completions").respond(200, json=COMPLETION)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    upstream = litellm_upstream  # only litellm translates
    result = await upstream.complete(UpstreamCall(
        model="hosted_vllm/my-model", api_base="http://vllm.test/v1", api_key="sk-tenant",
        body={"messages": MESSAGES, "temperature": 0.2, "tools": tools, "top_k": 5,
              "mock_response": "pwned", "api_base": "http://evil.test/v1"}))
    assert result["choices"][0]["message"]["content"] == "Hi!"
    sent = sent_body(route)
    assert sent["messages"] == MESSAGES and sent["tools"] == tools
    assert (sent["temperature"], sent["top_k"]) == (0.2, 5)
    assert "mock_response" not in sent and "api_base" not in sent

    stream = sse(chunk({"role": "assistant", "content": "Hi"}), chunk({}, "stop"),
                 {**chunk({}), "choices": [], "usage": COMPLETION["usage"]})
    route = mock.post("http://vllm.test/v1/chat/completions").respond(
        200, text=stream, headers={"content-type": "text/event-stream"})
    chunks = await chunks_of(upstream.stream(UpstreamCall(
        model="hosted_vllm/my-model", api_base="http://vllm.test/v1",
        body={"messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}})))
    assert sent_body(route)["stream_options"] == {"include_usage": True}
    assert chunks[-1]["usage"]["total_tokens"] == 14


# --- against the standalone fake server over real HTTP (no respx) -------------------------

@pytest.fixture(scope="module")
def fake_base():
    with serve(create_fake_app()) as base_url:
        yield f"{base_url}/v1"


def fake_call(fake_base: str, model: str, timeout: float = 10, **body) -> UpstreamCall:
    return UpstreamCall(model=f"openai/{model}", body={"messages": MESSAGES, **body},
                        api_base=fake_base, api_key="sk-fake", timeout=timeout)


async def test_upstream_and_fake_server_agree_without_streaming(upstream, fake_base):
    result = await upstream.complete(fake_call(fake_base, "echo-messages", temperature=0))
    assert result["model"] == "fake/echo-messages"
    assert json.loads(result["choices"][0]["message"]["content"]) == MESSAGES
    assert result["usage"]["total_tokens"] > 0


async def test_upstream_and_fake_server_agree_when_streaming(upstream, fake_base):
    chunks = await chunks_of(upstream.stream(fake_call(
        fake_base, "echo", stream=True, stream_options={"include_usage": True})))
    assert "".join(c["choices"][0]["delta"].get("content") or ""
                   for c in chunks if c["choices"]) == "Hello there"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0


async def test_fake_server_errors_come_through_with_their_status(upstream, fake_base):
    with pytest.raises(UpstreamError) as caught:
        await upstream.complete(fake_call(fake_base, "error-429"))
    assert caught.value.status == 429 and caught.value.body()["error"]["code"] \
        == "rate_limit_exceeded"
    with pytest.raises(UpstreamError) as caught:
        await anext(upstream.stream(fake_call(fake_base, "error-503", stream=True)))
    assert caught.value.status == 503


async def test_call_timeout_is_honoured(upstream, fake_base):
    # An upstream that answers only after 60 s: the call times out (the 0.3 s timeout is the
    # claim; the clock is not asserted — a busy machine may take longer to raise).
    with pytest.raises(UpstreamTimeout):
        await upstream.complete(fake_call(fake_base, "slow-60000", timeout=0.3))


async def test_without_a_configured_key_openai_api_key_is_sent_on_both_paths(
        upstream, mock, monkeypatch):
    # A config that relied on litellm reading OPENAI_API_KEY keeps working on the direct path.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    route = mock.post(URL).respond(200, json=COMPLETION)
    await upstream.complete(UpstreamCall(model="openai/gpt-4o-mini",
                                         body={"messages": MESSAGES}, api_base=BASE, timeout=10))
    assert route.calls.last.request.headers["authorization"] == "Bearer sk-from-env"
