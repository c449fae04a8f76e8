"""Same-dialect pass-through: a Messages-door request to an `anthropic/` route goes over direct
HTTP (gateway/upstream/direct_anthropic.py) with the rewritten messages and the client's other
fields as it sent them, and the client gets the upstream's own bytes back. The upstream is a
loopback server that records what it receives and answers with fixed bytes."""

from __future__ import annotations

import json
from typing import Any, Iterator

import anthropic
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.store import connect
from gateway.store.redis_store import RedisStore
from tests.support.gateway import KEYS, conversation_key, gateway_config, running_gateway
from tests.support.servers import serve

ANSWER = (b'{"id":"msg_up_1","type":"message","role":"assistant","model":"claude-up",'
          b'"content":[{"type":"thinking","thinking":"Done.","signature":"sig-2"},'
          b'{"type":"text","text":"Sunny, so  no coat."}],'
          b'"stop_reason":"stop_sequence","stop_sequence":"###",'
          b'"usage":{"input_tokens":20,"cache_read_input_tokens":100,"output_tokens":7},'
          b'"x_upstream_only":{"kept":true}}')
EVENTS = [
    {"type": "message_start", "message": {
        "id": "msg_up_2", "type": "message", "role": "assistant", "model": "claude-up",
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 30, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0,
     "content_block": {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {}}},
    {"type": "ping"},
    {"type": "content_block_delta", "index": 0,
     "delta": {"type": "input_json_delta", "partial_json": "{\"input\": "}},
    {"type": "content_block_delta", "index": 0,
     "delta": {"type": "input_json_delta", "partial_json": "\"Oslo\"}"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
     "usage": {"output_tokens": 9}},
    {"type": "message_stop"}]
STREAM = b"".join(b"event: " + e["type"].encode() + b"\ndata: "
                  + json.dumps(e, separators=(", ", ": ")).encode() + b"\n\n" for e in EVENTS)
OVERLOADED = (b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
              b'"message":"Overloaded"}}\n\n')
TOOL = {"name": "get_weather", "description": "The weather.",
        "input_schema": {"type": "object", "properties": {"input": {"type": "string"}}}}
HISTORY = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Use the tool.", "signature": "sig-1"},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"input": "Paris"}}]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "service down",
         "is_error": True},
        {"type": "text", "text": "Try again?"}]}]


@pytest.fixture
def upstream() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []

    async def messages(request: Request) -> Response:
        body = json.loads(await request.body())
        seen.append({"body": body, "headers": dict(request.headers), "path": request.url.path})
        if body["model"] == "claude-broken":  # not an answer at all
            return Response(b"<html>bad gateway</html>", media_type="text/html")
        if body["model"] == "claude-overloaded":  # fails after its first event
            return Response(STREAM.split(b"\n\n")[0] + b"\n\n" + OVERLOADED,
                            media_type="text/event-stream")
        if body.get("stream"):
            return Response(STREAM, media_type="text/event-stream")
        return Response(ANSWER, media_type="application/json")

    with serve(Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])) as url:
        yield url, seen


@pytest.fixture
def gateway_url(upstream, redis_url, monkeypatch) -> Iterator[str]:
    import litellm  # noqa: F401 — the route's other doors need it: imported before the start
    monkeypatch.setenv("UPSTREAM_KEY", "sk-ant-upstream")
    models = {name: {"model": f"anthropic/{name}", "api_base": upstream[0],
                     "api_key_env": "UPSTREAM_KEY"}
              for name in ("claude-broken", "claude-overloaded")}
    models["claude"] = {"model": "anthropic/claude-up", "api_base": upstream[0],
                        "api_key_env": "UPSTREAM_KEY"}
    with running_gateway(gateway_config(redis_url, models=models)) as url:
        yield url


def unmarked(value: Any) -> Any:
    """`value` without the gateway's cache breakpoints (`cache_control`), a content list of
    one text part read as its text (a marked string becomes such a list)."""
    if isinstance(value, dict):
        return {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        parts = [unmarked(v) for v in value]
        if len(parts) == 1 and isinstance(parts[0], dict) and set(parts[0]) == {"type", "text"} \
                and parts[0]["type"] == "text":
            return parts[0]["text"]
        return parts
    return value


def post(url: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(url + "/v1/messages", json=body, timeout=30, headers={
        "x-api-key": KEYS["acme"], "anthropic-version": "2023-06-01", **headers})


async def test_the_client_body_goes_upstream_and_the_answer_bytes_come_back(gateway_url,
                                                                            upstream, redis_url):
    body = {"model": "claude", "max_tokens": 100, "system": "Be brief.", "tools": [TOOL],
            "tool_choice": {"type": "auto"}, "stop_sequences": ["###"], "temperature": 0.5,
            "metadata": {"user_id": "u-1"}, "thinking": {"type": "enabled", "budget_tokens": 64},
            "messages": HISTORY}
    response = post(gateway_url, body, **{"anthropic-beta": "interleaved-thinking-2025-05-14",
                                          "X-Conversation-Id": "pass-1"})
    assert response.status_code == 200
    assert response.content == ANSWER  # the upstream's bytes, not re-encoded
    (call,) = upstream[1]
    sent, headers = call["body"], call["headers"]
    assert call["path"] == "/v1/messages"
    assert (headers["x-api-key"], headers["anthropic-version"], headers["anthropic-beta"]) == (
        "sk-ant-upstream", "2023-06-01", "interleaved-thinking-2025-05-14")
    # Every field but the model and the messages as the client sent it, untranslated.
    assert {k: v for k, v in sent.items() if k not in ("model", "messages", "system")} == {
        k: v for k, v in body.items() if k not in ("model", "messages", "system")}
    assert sent["model"] == "claude-up"
    assert "Be brief." in [b["text"] for b in sent["system"]]
    # thinking, tool_use, tool_result with is_error — and the gateway's cache breakpoint at
    # the end of the stable prefix: the history goes whole with nothing after it, so the
    # next request repeats all of this one — the mark is on its last text, as a client's own.
    assert unmarked(sent["messages"]) == unmarked(HISTORY)
    assert sent["messages"][2]["content"][0]["content"] == "service down"
    assert sent["messages"][2]["content"][1] == {
        "type": "text", "text": "Try again?", "cache_control": {"type": "ephemeral"}}

    # The reply is recorded in the form the client resends: the history continues unbranched.
    resent = [*HISTORY, {"role": "assistant", "content": response.json()["content"]},
              {"role": "user", "content": "Thanks!"}]
    assert post(gateway_url, {**body, "messages": resent},
                **{"X-Conversation-Id": "pass-1"}).status_code == 200
    assert unmarked(upstream[1][-1]["body"]["messages"]) == unmarked(resent)
    redis = connect(redis_url)
    try:
        store = RedisStore(redis)
        stored = await store.load(conversation_key("pass-1", user="u-1"))
        assert [s.message.role for s in stored] == ["user", "assistant", "tool", "user",
                                                    "assistant", "user", "assistant"]
        assert await store.branches(conversation_key("pass-1", user="u-1")) == ()
    finally:
        await redis.aclose()


def test_a_stream_is_passed_through_event_for_event(gateway_url, upstream):
    body = {"model": "claude", "max_tokens": 100, "stream": True, "tools": [TOOL],
            "messages": [{"role": "user", "content": "Oslo?"}]}
    with httpx.stream("POST", gateway_url + "/v1/messages", json=body, timeout=30,
                      headers={"x-api-key": KEYS["acme"]}) as response:
        raw = response.read()
    assert response.status_code == 200 and raw == STREAM
    assert upstream[1][0]["body"]["stream"] is True
    client = anthropic.Anthropic(base_url=gateway_url, api_key=KEYS["acme"], max_retries=0)
    with client.messages.stream(model="claude", max_tokens=100, tools=[TOOL],
                                messages=[{"role": "user", "content": "Oslo?"}]) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use" and final.content[0].input == {"input": "Oslo"}
    assert final.usage.output_tokens == 9


def test_the_sdk_reads_the_passed_through_answer(gateway_url):
    client = anthropic.Anthropic(base_url=gateway_url, api_key=KEYS["acme"], max_retries=0)
    message = client.messages.create(model="claude", max_tokens=100, stop_sequences=["###"],
                                     messages=[{"role": "user", "content": "Coat?"}])
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "###")
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.usage.cache_read_input_tokens == 100


def test_an_upstream_failure_is_anthropics_error_never_a_crash(gateway_url):
    asked = {"max_tokens": 10, "messages": [{"role": "user", "content": "x"}]}
    response = post(gateway_url, {"model": "claude-broken", **asked})
    assert response.status_code == 502
    assert response.json()["type"] == "error" and response.json()["error"]["type"] == "api_error"
    with httpx.stream("POST", gateway_url + "/v1/messages", timeout=30,
                      json={"model": "claude-overloaded", "stream": True, **asked},
                      headers={"x-api-key": KEYS["acme"]}) as streamed:
        raw = streamed.read()
    events = [e.split(b"\n")[0] for e in raw.split(b"\n\n") if e]
    assert events == [b"event: message_start", b"event: error"]
    assert b'"overloaded_error"' in raw and b"Overloaded" in raw
