"""The built-in fake upstream: in process (FakeUpstream), over HTTP (fake server), and as seen
by the real openai SDK."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from gateway.errors import UpstreamError
from gateway.ports import UpstreamCall
from gateway.upstream import RoutingUpstream
from gateway.upstream.fake import FINGERPRINT, FakeUpstream, behaviour_for, keep
from gateway.upstream.fake_server import create_fake_app
from tests.support.servers import serve

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Où est la gare ? 火车站在哪里？"},
    {"role": "assistant", "content": "Tout droit."},
    {"role": "user", "content": [{"type": "text", "text": "And then "},
                                 {"type": "text", "text": "left?"}]},
]


@pytest.fixture(scope="module")
def fake_url():
    with serve(create_fake_app()) as base_url:
        yield base_url


def call(model: str, **body) -> UpstreamCall:
    return UpstreamCall(model=model, body={"messages": MESSAGES, **body})


def content_of(chunks: list[dict]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


@pytest.mark.parametrize("model, kind, delay, status", [
    ("fake/echo", "echo", 0, 200),
    ("echo", "echo", 0, 200),
    ("fake/gpt-4o-mini", "echo", 0, 200),
    ("fake/echo-messages", "echo-messages", 0, 200),
    ("fake/slow", "echo", 2.0, 200),
    ("fake/slow-250", "echo", 0.25, 200),
    ("fake/error", "error", 0, 500),
    ("fake/error-429", "error", 0, 429),
    ("error-400", "error", 0, 400),
    ("fake/error-999", "echo", 0, 200),
    ("fake/tool-call", "tool-call", 0, 200),
    ("fake/agent", "agent", 0, 200),
])
def test_model_name_selects_behaviour(model, kind, delay, status):
    behaviour = behaviour_for(model)
    assert (behaviour.kind, behaviour.delay, behaviour.status) == (kind, delay, status)


async def test_echo_replies_with_last_user_text_and_is_labelled_fake():
    result = await FakeUpstream().complete(call("fake/echo"))
    assert result["object"] == "chat.completion"
    assert result["model"] == "fake/echo"
    assert result["system_fingerprint"] == FINGERPRINT
    assert result["choices"] == [{"index": 0, "logprobs": None, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": "And then left?",
                                              "refusal": None}}]
    usage = result["usage"]
    assert usage["completion_tokens"] > 0 and usage["prompt_tokens"] > usage["completion_tokens"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


async def test_unknown_model_behaves_like_echo():
    result = await FakeUpstream().complete(call("fake/whatever-model"))
    assert result["choices"][0]["message"]["content"] == "And then left?"
    assert result["model"] == "fake/whatever-model"


async def test_echo_messages_replies_with_exactly_the_messages_received():
    result = await FakeUpstream().complete(call("fake/echo-messages"))
    content = result["choices"][0]["message"]["content"]
    assert content == json.dumps(MESSAGES, ensure_ascii=False)
    assert json.loads(content) == MESSAGES


@pytest.mark.parametrize("model, status", [("fake/error", 500), ("fake/error-429", 429),
                                           ("fake/error-400", 400), ("fake/error-503", 503)])
async def test_error_behaviours_raise_with_status_and_openai_body(model, status):
    with pytest.raises(UpstreamError) as caught:
        await FakeUpstream().complete(call(model))
    assert caught.value.status == status
    body = caught.value.body()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert "fake upstream" in body["error"]["message"]


async def test_stream_error_raises_on_first_chunk():
    chunks = FakeUpstream().stream(call("fake/error-503", stream=True))
    with pytest.raises(UpstreamError) as caught:
        await anext(chunks)
    assert caught.value.status == 503


async def test_stream_is_openai_chunks_that_assemble_to_the_reply():
    chunks = [c async for c in FakeUpstream().stream(call("fake/echo", stream=True))]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert len(chunks) >= 4  # role, content in pieces, finish
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "stop"
    assert content_of(chunks) == "And then left?"
    assert not any("usage" in c for c in chunks)


async def test_stream_ends_with_usage_chunk_when_asked():
    chunks = [c async for c in FakeUpstream().stream(
        call("fake/echo", stream=True, stream_options={"include_usage": True}))]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] > 0
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"


async def test_slow_waits_then_echoes():
    started = time.monotonic()
    result = await FakeUpstream().complete(call("fake/slow-150"))
    assert time.monotonic() - started >= 0.15
    assert result["choices"][0]["message"]["content"] == "And then left?"


async def test_slow_stream_spreads_the_delay_over_chunks():
    # The first chunk comes before the delay has passed, the last after it: it is spread.
    # (Lower bounds only: a busy machine can make a wait longer, never shorter.)
    started = time.monotonic()
    chunks = FakeUpstream().stream(call("fake/slow-3000", stream=True))
    await anext(chunks)
    first = time.monotonic() - started
    rest = [c async for c in chunks]
    total = time.monotonic() - started
    assert total >= 3.0 and total - first >= 1.5  # at least half of it after the first
    assert content_of(rest) == "And then left?"


async def test_tool_call_calls_the_first_tool_with_the_user_text():
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    result = await FakeUpstream().complete(call("fake/tool-call", tools=tools))
    choice = result["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    (tool_call,) = choice["message"]["tool_calls"]
    assert tool_call["function"]["name"] == "lookup"
    assert json.loads(tool_call["function"]["arguments"]) == {"input": "And then left?"}

    chunks = [c async for c in FakeUpstream().stream(call("fake/tool-call", tools=tools))]
    arguments = "".join(c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
                        for c in chunks if c["choices"][0]["delta"].get("tool_calls"))
    assert json.loads(arguments) == {"input": "And then left?"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_routing_sends_fake_models_to_the_fake():
    class Refuses:
        async def complete(self, call):
            raise AssertionError("litellm must not be called for fake/ models")

    upstream = RoutingUpstream(litellm=Refuses())
    result = await upstream.complete(call("fake/echo"))
    assert result["choices"][0]["message"]["content"] == "And then left?"
    chunks = [c async for c in upstream.stream(call("fake/echo", stream=True))]
    assert content_of(chunks) == "And then left?"


async def test_routing_sends_other_models_to_litellm():
    class Records:
        calls: list[UpstreamCall] = []

        async def complete(self, call):
            self.calls.append(call)
            return {"routed": True}

    recorder = Records()
    assert await RoutingUpstream(litellm=recorder).complete(call("openai/gpt-4o-mini")) \
        == {"routed": True}
    assert [c.model for c in recorder.calls] == ["openai/gpt-4o-mini"]


# --- the standalone server over real HTTP -------------------------------------------------

async def test_server_answers_chat_completions(fake_url):
    async with httpx.AsyncClient(base_url=fake_url) as client:
        for path in ("/v1/chat/completions", "/chat/completions"):
            response = await client.post(path, json={"model": "echo-messages",
                                                     "messages": MESSAGES})
            assert response.status_code == 200
            result = response.json()
            assert result["model"] == "fake/echo-messages"
            assert json.loads(result["choices"][0]["message"]["content"]) == MESSAGES


async def test_server_streams_sse_ending_with_done(fake_url):
    body = {"model": "echo", "messages": MESSAGES, "stream": True,
            "stream_options": {"include_usage": True}}
    async with httpx.AsyncClient(base_url=fake_url) as client:
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            raw = (await response.aread()).decode()
    events = raw.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-2]]
    assert all(e.startswith("data: ") for e in events[:-1])
    assert content_of(chunks) == "And then left?"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0


@pytest.mark.parametrize("model, status", [("error", 500), ("error-429", 429),
                                           ("error-400", 400), ("error-503", 503)])
async def test_server_errors_are_http_errors_with_openai_body(fake_url, model, status):
    async with httpx.AsyncClient(base_url=fake_url) as client:
        for stream in (False, True):
            response = await client.post("/v1/chat/completions", json={
                "model": model, "messages": MESSAGES, "stream": stream})
            assert response.status_code == status
            assert set(response.json()["error"]) == {"message", "type", "param", "code"}


async def test_server_rejects_a_body_that_is_not_json(fake_url):
    async with httpx.AsyncClient(base_url=fake_url) as client:
        response = await client.post("/v1/chat/completions", content=b"{nope")
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


async def test_server_lists_models_and_reports_health(fake_url):
    async with httpx.AsyncClient(base_url=fake_url) as client:
        models = (await client.get("/v1/models")).json()
        health = await client.get("/healthz")
    assert models["object"] == "list" and "echo-messages" in {m["id"] for m in models["data"]}
    assert health.status_code == 200


# --- the real openai SDK as the client ----------------------------------------------------

async def test_openai_sdk_talks_to_the_fake_server(fake_url):
    client = openai.AsyncOpenAI(base_url=f"{fake_url}/v1", api_key="sk-fake", max_retries=0)
    result = await client.chat.completions.create(model="echo", messages=MESSAGES)
    assert result.choices[0].message.content == "And then left?"
    assert result.usage.total_tokens > 0

    stream = await client.chat.completions.create(
        model="echo", messages=MESSAGES, stream=True, stream_options={"include_usage": True})
    chunks = [chunk async for chunk in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) \
        == "And then left?"
    assert chunks[-1].usage.completion_tokens > 0

    with pytest.raises(openai.RateLimitError) as caught:
        await client.chat.completions.create(model="error-429", messages=MESSAGES)
    assert caught.value.status_code == 429
    await client.close()


async def test_a_stop_sequence_cuts_the_echo_and_is_named_as_vllm_does():
    result = await FakeUpstream().complete(call("fake/echo", stop=["zzz", "left", " then"]))
    choice = result["choices"][0]
    assert choice["message"]["content"] == "And"
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", " then")
    chunks = [c async for c in FakeUpstream().stream(call("fake/echo", stop="left"))]
    assert content_of(chunks) == "And then "
    assert chunks[-1]["choices"][0]["stop_reason"] == "left"
    plain = await FakeUpstream().complete(call("fake/echo", stop="nowhere"))
    assert "stop_reason" not in plain["choices"][0]


# --- the providers' rules, the agent behaviour, the requests kept ----------------------------

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
ASKED = {"role": "user", "content": "Find the flaky test."}
CALLED = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]}
ANSWERED = {"role": "tool", "tool_call_id": "c1", "content": "test_x.py"}


@pytest.mark.parametrize("model, window", [("fake/agent-ctx16000", 16000),
                                           ("echo-ctx8000", 8000), ("fake/agent", None)])
def test_a_ctx_suffix_sets_the_window(model, window):
    behaviour = behaviour_for(model)
    assert (behaviour.window, behaviour.name) == (window, model.removeprefix("fake/"))
    assert behaviour.kind == ("agent" if "agent" in model else "echo")


@pytest.mark.parametrize("model, messages, message, param, code", [
    ("fake/echo", [ASKED, ANSWERED],
     "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
     "with 'tool_calls'.", "messages.[1].role", None),
    ("fake/echo", [ASKED, CALLED, ASKED],
     "An assistant message with 'tool_calls' must be followed by tool messages responding to "
     "each 'tool_call_id'. The following tool_call_ids did not have response messages: c1",
     "messages.[1].role", None),
    ("fake/echo-ctx10", [{"role": "user", "content": "more words than ten tokens can hold, "
                                                     "many more words indeed"}],
     "This model's maximum context length is 10 tokens. However, your messages resulted in ",
     "messages", "context_length_exceeded"),
])
async def test_a_request_openai_rejects_is_its_400_in_its_words_and_is_kept(
        model, messages, message, param, code):
    upstream = FakeUpstream()
    for answer in (upstream.complete, lambda c: anext(upstream.stream(c))):
        with pytest.raises(UpstreamError) as caught:
            await answer(UpstreamCall(model=model, body={"messages": messages}))
        error = caught.value.body()["error"]
        assert caught.value.status == 400 and error["type"] == "invalid_request_error"
        assert error["message"].startswith(message) and (error["param"], error["code"]) == (
            param, code)
    assert upstream.received == [{"path": "/v1/chat/completions", "body": {"messages": messages},
                                  "status": 400}] * 2


async def test_a_complete_tool_loop_is_accepted_and_kept():
    upstream = FakeUpstream()
    body = {"messages": [ASKED, CALLED, ANSWERED], "tools": TOOLS}
    result = await upstream.complete(UpstreamCall(model="fake/echo", body=body))
    assert result["choices"][0]["message"]["content"] == "Find the flaky test."
    assert upstream.received == [{"path": "/v1/chat/completions", "body": body}]


async def test_agent_calls_the_first_tool_with_the_step_and_a_stable_id():
    upstream = FakeUpstream()
    body = {"messages": [ASKED, CALLED, ANSWERED], "tools": TOOLS}
    result = await upstream.complete(UpstreamCall(model="fake/agent", body=body))
    choice = result["choices"][0]
    (tool_call,) = choice["message"]["tool_calls"]
    assert choice["finish_reason"] == "tool_calls" and tool_call["function"]["name"] == "lookup"
    assert json.loads(tool_call["function"]["arguments"]) == {"step": 3}

    chunks = [c async for c in upstream.stream(UpstreamCall(model="fake/agent", body=body))]
    deltas = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks
              if c["choices"][0]["delta"].get("tool_calls")]
    assert deltas[0]["id"] == tool_call["id"]  # the same request: the same id
    assert json.loads("".join(d["function"]["arguments"] for d in deltas)) == {"step": 3}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"

    plain = await upstream.complete(UpstreamCall(model="fake/agent", body={"messages": [ASKED]}))
    assert plain["choices"][0]["message"]["content"] == "Find the flaky test."


def test_only_the_last_thousand_requests_are_kept():
    received: list[dict] = []
    for n in range(1_005):
        keep(received, "/v1/chat/completions", {"n": n})
    assert len(received) == 1_000 and received[0]["body"] == {"n": 5}


async def test_server_rejects_in_openais_words_and_keeps_what_it_received(fake_url):
    client = openai.AsyncOpenAI(base_url=f"{fake_url}/v1", api_key="sk-fake", max_retries=0)
    async with httpx.AsyncClient(base_url=fake_url) as http:
        await http.delete("/fake/received")
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="echo-ctx5", messages=MESSAGES)
        assert caught.value.code == "context_length_exceeded"
        result = await client.chat.completions.create(model="agent", tools=TOOLS,
                                                      messages=[ASKED, CALLED, ANSWERED])
        assert json.loads(result.choices[0].message.tool_calls[0].function.arguments) == \
            {"step": 3}
        kept = (await http.get("/fake/received")).json()["requests"]
    await client.close()
    assert [(r["path"], r["body"]["model"], r.get("status")) for r in kept] == [
        ("/v1/chat/completions", "echo-ctx5", 400), ("/v1/chat/completions", "agent", None)]
