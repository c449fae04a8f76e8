"""The gateway end to end: the real app over HTTP, the real openai SDK, a real store.

The cases that depend on the upstream run three ways: the in-process fake (`fake/...`), and
the standalone fake server over loopback HTTP reached by the direct path and by litellm.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

import httpx
import openai
import pytest

from gateway.store import connect
from gateway.store.redis_store import RedisStore
from gateway.upstream.fake_server import create_fake_app
from tests.support.gateway import KEYS, MODELS, conversation_key, forwarded, gateway_config, \
    running_gateway
from tests.support.servers import serve

UPSTREAM_PATHS = pytest.mark.parametrize("path", ["in-process", "direct", "litellm"],
                                         indirect=True)
"""For a test that depends on the upstream: run it on each path a call can take."""


@pytest.fixture(scope="module")
def fake_server_url():
    with serve(create_fake_app()) as url:
        yield url + "/v1"


@pytest.fixture(params=["in-process"])
def path(request):
    return request.param


@pytest.fixture
def gateway_url(redis_url, path, request, monkeypatch):
    models = None
    if path != "in-process":
        monkeypatch.setenv("FAKE_SERVER_KEY", "sk-fake")  # the openai SDK under litellm wants one
        # The same aliases, served by the fake server; any litellm_params keep a route on
        # litellm (this one is litellm's own value, so it changes nothing else).
        base = request.getfixturevalue("fake_server_url")
        forced = {"litellm_params": {"max_retries": 0}} if path == "litellm" else {}
        models = {alias: {"model": "openai/" + m["model"].removeprefix("fake/"),
                          "api_base": base, "api_key_env": "FAKE_SERVER_KEY", **forced}
                  for alias, m in MODELS.items()}
    with running_gateway(gateway_config(redis_url, models=models)) as url:
        yield url


@pytest.fixture
def client(gateway_url):
    return openai.OpenAI(base_url=gateway_url + "/v1", api_key=KEYS["acme"], max_retries=0)


@pytest.fixture
async def store(redis_url):
    redis = connect(redis_url)
    yield RedisStore(redis)
    await redis.aclose()


def post(url, body, *, key=KEYS["acme"], headers=None, **kwargs):
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=30,
                      headers={"Authorization": f"Bearer {key}", **(headers or {})}, **kwargs)


def user(text):
    return {"role": "user", "content": text}


@UPSTREAM_PATHS
def test_openai_sdk_non_streaming_gets_the_upstream_answer(client):
    raw = client.chat.completions.with_raw_response.create(
        model="echo", messages=[user("hello there")],
        extra_headers={"X-Conversation-Id": "sdk-1"})
    completion = raw.parse()
    assert completion.choices[0].message.content == "hello there"
    assert completion.choices[0].message.role == "assistant"
    assert raw.headers["x-gateway-request-id"].startswith("req_")
    assert int(raw.headers["x-gateway-tokens-forwarded"]) > 0
    assert float(raw.headers["x-gateway-overhead-ms"]) >= 0


@UPSTREAM_PATHS
def test_openai_sdk_streaming_gets_every_chunk(client):
    stream = client.chat.completions.create(
        model="echo", stream=True, messages=[user("stream these words back to me")],
        extra_headers={"X-Conversation-Id": "sdk-2"})
    chunks = list(stream)
    assert len(chunks) > 2
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == \
        "stream these words back to me"


@UPSTREAM_PATHS
async def test_turns_are_recorded_with_the_reply(client, store):
    for text in ("first", "second"):
        client.chat.completions.create(model="echo", messages=[user(text)],
                                       extra_headers={"X-Conversation-Id": "rec"})
    stored = await store.load(conversation_key("rec"))
    assert [(s.message.role, s.message.text) for s in stored] == [
        ("user", "first"), ("assistant", "first"), ("user", "second"), ("assistant", "second")]


@UPSTREAM_PATHS
async def test_streamed_reply_is_recorded(client, store):
    list(client.chat.completions.create(model="echo", stream=True, messages=[user("s1")],
                                        extra_headers={"X-Conversation-Id": "st"}))
    # A stream's turn is recorded after its last chunk is sent: wait for it, not the clock.
    deadline = time.monotonic() + 10
    while len(stored := await store.load(conversation_key("st"))) < 2 \
            and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert [s.message.text for s in stored] == ["s1", "s1"]
    assert not stored[-1].incomplete


async def test_forty_turn_stateless_conversation_is_stored_once_and_stays_under_budget(
        gateway_url, store):
    history: list[dict] = [{"role": "system", "content": "You are terse."}]
    budget = 2000 - 200
    for turn in range(40):
        history.append(user(f"Turn {turn}: " + "tell me more about the weather " * 8))
        response = post(gateway_url, {"model": "messages", "messages": history},
                        headers={"X-Conversation-Id": "long"})
        assert response.status_code == 200, response.text
        assert int(response.headers["x-gateway-tokens-forwarded"]) <= budget
        sent = forwarded(response.json()["choices"][0]["message"]["content"])
        assert sent[0] == history[0] and sent[-1] == history[-1]
        history.append(response.json()["choices"][0]["message"])
    assert int(response.headers["x-gateway-tokens-original"]) > 3 * budget
    stored = await store.load(conversation_key("long"))
    assert len(stored) == 80  # 40 user + 40 assistant, each once; system prompts not stored
    assert [s.message.to_openai()["content"] for s in stored[::2]] == \
        [m["content"] for m in history[1::2]]


@UPSTREAM_PATHS
def test_stateless_and_stateful_clients_get_the_same_upstream_request(gateway_url):
    system = {"role": "system", "content": "Be brief."}
    full_history: list[dict] = []
    for turn in range(6):
        message = user(f"question {turn} " + "padding words " * 30)
        full_history.append(message)
        stateless = post(gateway_url, {"model": "messages", "messages": [system, *full_history]},
                         headers={"X-Conversation-Id": "stateless"})
        stateful = post(gateway_url, {"model": "messages", "messages": [system, message]},
                        headers={"X-Conversation-Id": "stateful"})
        a = stateless.json()["choices"][0]["message"]["content"]
        b = stateful.json()["choices"][0]["message"]["content"]
        assert a == b
        full_history.append({"role": "assistant", "content": a})


@UPSTREAM_PATHS
async def test_no_conversation_id_forwards_unchanged_and_stores_nothing(gateway_url, redis_url):
    messages = [{"role": "system", "content": "s"}, user("a"), {"role": "assistant",
                                                               "content": "b"}, user("c")]
    response = post(gateway_url, {"model": "messages", "messages": messages})
    assert response.status_code == 200
    assert forwarded(response.json()["choices"][0]["message"]["content"]) == messages
    assert response.headers["x-gateway-passthrough"] == "no_conversation_id"
    redis = connect(redis_url)
    try:
        assert [k async for k in redis.scan_iter("gw:*conv*")] == []
    finally:
        await redis.aclose()


async def test_persist_false_uses_memory_but_stores_nothing(gateway_url, store):
    post(gateway_url, {"model": "echo", "messages": [user("remember me")]},
         headers={"X-Conversation-Id": "tmp"})
    response = post(gateway_url, {"model": "messages", "messages": [user("temporary")]},
                    headers={"X-Conversation-Id": "tmp", "X-Gateway-Persist": "false"})
    seen = [m["content"] for m in forwarded(response.json()["choices"][0]["message"]["content"])]
    assert seen == ["remember me", "remember me", "temporary"]
    assert [s.message.text for s in await store.load(conversation_key("tmp"))] == \
        ["remember me", "remember me"]


def test_memory_never_crosses_tenants_or_users(gateway_url):
    canary = "CANARY-7f3a9c"
    post(gateway_url, {"model": "echo", "messages": [user(f"my secret is {canary}")]},
         headers={"X-Conversation-Id": "shared-id", "X-User-Id": "alice"})
    probes = [
        ({"X-Conversation-Id": "shared-id", "X-User-Id": "alice"}, KEYS["globex"]),
        ({"X-Conversation-Id": "shared-id", "X-User-Id": "bob"}, KEYS["acme"]),
        ({"X-Conversation-Id": "shared-id"}, KEYS["acme"]),
    ]
    for headers, key in probes:
        response = post(gateway_url, {"model": "messages", "messages": [user("what is it?")]},
                        headers=headers, key=key)
        assert response.status_code == 200
        assert canary not in response.text, (headers, key)
    own = post(gateway_url, {"model": "messages", "messages": [user("what is it?")]},
               headers={"X-Conversation-Id": "shared-id", "X-User-Id": "alice"})
    assert canary in own.text  # the canary is reachable where it belongs


def test_body_user_field_keys_the_user_too(gateway_url):
    post(gateway_url, {"model": "echo", "user": "carol", "messages": [user("carol's note")]},
         headers={"X-Conversation-Id": "u"})
    other = post(gateway_url, {"model": "messages", "user": "dave", "messages": [user("?")]},
                 headers={"X-Conversation-Id": "u"})
    assert "carol's note" not in other.text


@pytest.mark.parametrize("body, status, param", [
    (b"{not json", 400, None),
    (b"[1, 2]", 400, None),
    ({"messages": [user("x")]}, 400, "model"),
    ({"model": "echo"}, 400, "messages"),
    ({"model": "echo", "messages": []}, 400, "messages"),
    ({"model": "echo", "messages": "hello"}, 400, "messages"),
    ({"model": 3, "messages": [user("x")]}, 400, "model"),
    ({"model": "echo", "messages": [{"role": "wizard", "content": "x"}]}, 400,
     "messages[0].role"),
    ({"model": "echo", "messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content"),
    ({"model": "echo", "messages": [{"role": "user"}]}, 400, "messages[0].content"),
    ({"model": "echo", "messages": [{"role": "tool", "content": "x"}]}, 400,
     "messages[0].tool_call_id"),
    ({"model": "echo", "messages": [user("x")], "stream": "yes"}, 400, "stream"),
    ({"model": "nope", "messages": [user("x")]}, 404, "model"),
])
def test_bad_input_gets_a_4xx_in_openai_error_shape(gateway_url, body, status, param):
    kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
    response = httpx.post(gateway_url + "/v1/chat/completions", timeout=30,
                          headers={"Authorization": f"Bearer {KEYS['acme']}",
                                   "X-Conversation-Id": "bad"}, **kwargs)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["param"] == param
    if status == 404:
        assert error["code"] == "model_not_found"


@pytest.mark.parametrize("headers, status", [
    ({}, 401),
    ({"Authorization": "Bearer wrong"}, 401),
    ({"Authorization": "Basic abc"}, 401),
    ({"Authorization": f"Bearer {KEYS['acme']}", "X-Conversation-Id": "has space"}, 400),
    ({"Authorization": f"Bearer {KEYS['acme']}", "X-Conversation-Id": "x" * 200}, 400),
    ({"Authorization": f"Bearer {KEYS['acme']}", "X-Conversation-Id": "ok",
      "X-User-Id": "a/b"}, 400),
    ({"Authorization": f"Bearer {KEYS['acme']}", "X-Gateway-Persist": "maybe"}, 400),
])
def test_bad_keys_and_ids_are_refused(gateway_url, headers, status):
    response = httpx.post(gateway_url + "/v1/chat/completions", timeout=30, headers=headers,
                          json={"model": "echo", "messages": [user("x")]})
    assert response.status_code == status
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_body_over_the_limit_gets_413(redis_url):
    config = gateway_config(redis_url, server={"max_body_bytes": 2048})
    with running_gateway(config) as url:
        response = post(url, {"model": "echo", "messages": [user("x" * 5000)]})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


@UPSTREAM_PATHS
def test_openai_sdk_sees_upstream_errors_with_their_status(client):
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(model="rate-limited", messages=[user("x")],
                                       extra_headers={"X-Conversation-Id": "err"})
    assert info.value.status_code == 429
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="broken", messages=[user("x")], stream=True,
                                       extra_headers={"X-Conversation-Id": "err"})


@UPSTREAM_PATHS
async def test_upstream_error_records_nothing(client, store):
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="rate-limited", messages=[user("lost?")],
                                       extra_headers={"X-Conversation-Id": "err2"})
    assert await store.load(conversation_key("err2")) == ()


def test_models_lists_the_tenants_aliases(client):
    assert sorted(m.id for m in client.models.list()) == sorted(
        ["echo", "messages", "rate-limited", "broken", "slow"])


def test_health_and_readiness(gateway_url):
    assert httpx.get(gateway_url + "/healthz").json() == {"status": "ok"}
    assert httpx.get(gateway_url + "/readyz").status_code == 200
    assert "gateway_requests_total" in httpx.get(gateway_url + "/metrics").text


def test_unknown_route_is_a_404_in_openai_shape(gateway_url):
    response = httpx.get(gateway_url + "/v1/nothing")
    assert response.status_code == 404 and "error" in response.json()


def test_a_stream_the_openai_sdk_reads_is_logged_once(client, caplog):
    # The SDK hangs up as soon as it reads [DONE], while the turn is still being recorded.
    with caplog.at_level(logging.INFO, logger="gateway.request"):
        stream = client.chat.completions.create(
            model="echo", messages=[user("stream me")], stream=True,
            extra_headers={"X-Conversation-Id": "sdk-stream-log"})
        assert "".join(c.choices[0].delta.content or "" for c in stream) == "stream me"
        deadline = time.monotonic() + 10
        while not [r for r in caplog.records if r.name == "gateway.request"]:
            assert time.monotonic() < deadline, "the streamed request was never logged"
            time.sleep(0.05)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.request"]
    assert len(lines) == 1 and lines[0]["stream"] is True and lines[0]["persisted"] is True


@pytest.mark.parametrize("mode", ["inline", "background"])
def test_store_down_fails_open(caplog, mode):
    # Nothing listens on this port: every store call fails, from start-up on.
    config = gateway_config("redis://127.0.0.1:1/0",
                            recorder={"mode": mode, "drain_timeout_seconds": 0.5})
    messages = [user("a"), {"role": "assistant", "content": "b"}, user("c")]
    with caplog.at_level(logging.INFO, logger="gateway.request"), running_gateway(config) as url:
        response = post(url, {"model": "messages", "messages": messages},
                        headers={"X-Conversation-Id": "down"})
        assert httpx.get(url + "/readyz").status_code == 503
        assert httpx.get(url + "/healthz").status_code == 200
    assert response.status_code == 200
    assert forwarded(response.json()["choices"][0]["message"]["content"]) == messages
    assert response.headers["x-gateway-passthrough"] == "store_unavailable"
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.request"]
    assert lines and lines[-1]["passthrough"] == "store_unavailable"


@UPSTREAM_PATHS
def test_one_json_log_line_per_request(gateway_url, caplog):
    with caplog.at_level(logging.INFO, logger="gateway.request"):
        post(gateway_url, {"model": "echo", "messages": [user("log me")]},
             headers={"X-Conversation-Id": "logged", "X-User-Id": "erin"})
        post(gateway_url, {"model": "echo", "messages": [user("log me")], "stream": True},
             headers={"X-Conversation-Id": "logged", "X-User-Id": "erin"})
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.request"]
    assert len(lines) == 2
    for line, stream in zip(lines, (False, True)):
        assert line["tenant"] == "acme" and line["user"] == "erin"
        assert line["conversation"] == "logged" and line["model"] == "echo"
        assert line["stream"] is stream and line["status"] == 200
        for field in ("request_id", "tokens_original", "tokens_forwarded", "recent_turns",
                      "load_ms", "rewrite_ms", "upstream_ms", "total_ms", "reconcile"):
            assert field in line, field


@UPSTREAM_PATHS
async def test_sdk_client_resending_replies_as_returned_stores_one_branch(client, store):
    history = []
    for turn in range(3):
        history.append(user(f"question {turn}"))
        reply = client.chat.completions.create(model="echo", messages=history,
                                               extra_headers={"X-Conversation-Id": "sdk-hist"})
        history.append(reply.choices[0].message.model_dump())  # refusal: None, ...
    key = conversation_key("sdk-hist")
    assert [s.message.text for s in await store.load(key)] == [
        "question 0", "question 0", "question 1", "question 1", "question 2", "question 2"]
    assert await store.branches(key) == ()


def test_a_users_facts_reach_their_other_conversations_and_no_one_elses(gateway_url):
    post(gateway_url, {"model": "echo", "messages": [user("I live in Lisbon.")]},
         headers={"X-Conversation-Id": "first", "X-User-Id": "alice"})
    asked = {"model": "messages", "messages": [user("What is my location?")]}
    own = post(gateway_url, asked, headers={"X-Conversation-Id": "second", "X-User-Id": "alice"})
    other = post(gateway_url, asked, headers={"X-Conversation-Id": "second", "X-User-Id": "bob"})
    assert "Lisbon" in own.json()["choices"][0]["message"]["content"]
    assert int(own.headers["x-gateway-memory-recalled"]) >= 1  # no memory brief by default
    assert "Lisbon" not in other.text
    # What the recall's search indexes hold in this process is shown, by index.
    held = {line.split("{")[1].split("}")[0]: float(line.rsplit(" ", 1)[1])
            for line in httpx.get(gateway_url + "/metrics", timeout=10).text.splitlines()
            if line.startswith("gateway_memory_index_bytes{")}
    assert set(held) == {'index="dense"', 'index="lexical"'} and all(held.values()), held
    dropped = [line for line in httpx.get(gateway_url + "/metrics", timeout=10).text.splitlines()
               if line.startswith("gateway_memory_index_evictions{")]
    assert len(dropped) == 2, dropped  # dense and lexical, none dropped within the budget
    assert all(line.endswith(" 0.0") for line in dropped), dropped


def test_the_transcripts_a_process_keeps_decoded_are_shown_in_bytes(gateway_url):
    def held() -> float:
        return next(float(line.rsplit(" ", 1)[1]) for line in
                    httpx.get(gateway_url + "/metrics", timeout=10).text.splitlines()
                    if line.startswith("gateway_transcript_cache_bytes "))
    before = held()
    for question in ("first question", "second question"):  # the second loads the first
        assert post(gateway_url, {"model": "echo", "messages": [user(question)]},
                    headers={"X-Conversation-Id": "kept-decoded"}).status_code == 200
    assert held() > before


async def test_memory_that_cannot_be_read_is_skipped_and_said_in_a_header(gateway_url,
                                                                          redis_url):
    from gateway.memory.records.keys import MemoryKeySpace
    # Longer than the window (2,000 tokens): the history is compacted, so recall searches it.
    said = "remember the red door. " + "the hall was long and quiet. " * 400
    first = post(gateway_url, {"model": "echo", "messages": [user(said)]},
                 headers={"X-Conversation-Id": "broken"})
    assert first.status_code == 200 and "x-gateway-memory-error" not in first.headers
    # A memory key of the wrong type: every read of the recall index fails.
    redis = connect(redis_url)
    try:
        await redis.set(MemoryKeySpace().conversation(conversation_key("broken")).turns, "x")
    finally:
        await redis.aclose()
    messages = [user(said), {"role": "assistant", "content": "ok"}, user("which door?")]
    response = post(gateway_url, {"model": "messages", "messages": messages},
                    headers={"X-Conversation-Id": "broken"})
    assert response.status_code == 200  # fail open: the client's own messages go through
    assert forwarded(response.json()["choices"][0]["message"]["content"])[-1] == messages[-1]
    assert "ResponseError" in response.headers["x-gateway-memory-error"]


@pytest.mark.parametrize("sent, expected", [
    ({"X-Request-Id": "client-req-42"}, "client-req-42"),
    ({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
     "4bf92f3577b34da6a3ce929d0e0e4736"),
    ({"X-Request-Id": "has spaces\" and quotes"}, None),  # not a plain token: a new id
])
def test_a_clients_request_id_is_logged_and_echoed(gateway_url, caplog, sent, expected):
    with caplog.at_level(logging.INFO, logger="gateway.request"):
        response = post(gateway_url, {"model": "echo", "messages": [user("hi")]}, headers=sent)
    assert response.status_code == 200
    echoed = response.headers["x-request-id"]
    assert response.headers["x-gateway-request-id"] == echoed
    if expected is None:
        assert echoed.startswith("req_")
    else:
        assert echoed == expected
    logged = [json.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.request"]
    assert [line["request_id"] for line in logged] == [echoed]


def _gauge(text: str, name: str) -> float:
    (line,) = [line for line in text.splitlines() if line.startswith(name + " ")]
    return float(line.split()[1])


def test_metrics_show_the_shared_queues_whichever_process_works_them(redis_url):
    # `external`: no recorder in this process; the turns wait for a `gateway worker`.
    config = gateway_config(redis_url, recorder={"mode": "external"})
    with running_gateway(config) as url:
        for n in range(3):
            assert post(url, {"model": "echo", "messages": [user(f"q{n}")]},
                        headers={"X-Conversation-Id": f"queued-{n}"}).status_code == 200
        text = httpx.get(url + "/metrics", timeout=10).text
    assert _gauge(text, "gateway_record_queue_lag") == 3
    assert _gauge(text, "gateway_record_queue_length") == 3
    assert _gauge(text, "gateway_record_queue_pending") == 0
    assert _gauge(text, "gateway_record_dead_letters") == 0
    assert _gauge(text, "gateway_memory_queue_conversations") == 0


async def test_the_question_is_embedded_once_while_the_store_is_read(redis_url):
    """A request whose recall searches embeds the question once and uses that embedding for
    every search: one embedding per request, of exactly the question."""
    from gateway.http.app import create_app

    # A window the history outgrows: recall searches the conversation's own turns.
    app = create_app(gateway_config(redis_url, context={"max_context_tokens": 40,
                                                        "reserve_completion_tokens": 0}))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            headers = {"Authorization": f"Bearer {KEYS['acme']}", "X-Conversation-Id": "spec"}
            for text in ("my cat is called Quixote", "we live in Lisbon", "I like chess"):
                r = await client.post("/v1/chat/completions", headers=headers,
                                      json={"model": "echo", "messages": [user(text)]})
                assert r.status_code == 200
            service = app.state.gateway.memory.service
            model, seen = service.embedding.embedder, []

            class Counting:  # the same embedder, noting what it is asked to embed
                dim = model.dim

                def embed(self, texts):
                    seen.extend(texts)
                    return model.embed(texts)

                def embed_query(self, texts):  # the question is embedded as a search query
                    seen.extend(texts)
                    return model.embed_query(texts)

            service.embedding.embedder = Counting()
            r = await client.post("/v1/chat/completions", headers=headers,
                                  json={"model": "echo", "messages": [user("what is my cat called?")]})
    assert r.status_code == 200
    assert seen.count("what is my cat called?") == 1
