"""One-shot context end to end: the real gateway over HTTP, the real openai SDK as client, a
real store, inline recording (the recorder and the memory worker — index, summaries, facts,
profile — have run when a reply returns), and the fake upstream as a real HTTP server whose
received bodies are tapped at its edge.

The proof that nothing was persisted is store-wide: every key (name and value, whatever its
type) is read with SCAN, and the store's append-only file — which also holds what was written
and later deleted, such as applied record-stream entries — is searched byte for byte."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import openai
import pytest
import redis

from gateway.config import parse_config
from gateway.core.messages import Message
from gateway.core.one_shot import MARKER
from gateway.store import connect
from gateway.store.redis_store import RedisStore
from gateway.upstream.fake_server import create_fake_app
from tests.support.gateway import KEYS, conversation_key, gateway_config, running_gateway
from tests.support.processes import Processes, require_redis_server
from tests.support.redis import ENV_URL
from tests.support.servers import serve

TOOL_CANARY, DOC_CANARY = "Qx7ToolCanary", "Vz9DocCanary"
SMALL_CANARY = "Kp3SmallCanary"
TOOLS = [{"type": "function", "function": {
    "name": "search", "description": "Search the web.",
    "parameters": {"type": "object", "properties": {"input": {"type": "string"}}}}}]
BIG_RESULT = f"Lighthouse page: the keeper's code is {TOOL_CANARY}. " * 250  # ~12k chars
DOCUMENT = f"Internal memo, do not keep: the vault word is {DOC_CANARY}. " * 5
USER = "olga-1"


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[str, list[bytes]]]:
    """The fake upstream server; every request body it receives, as bytes on the wire."""
    bodies: list[bytes] = []
    app = create_fake_app()

    async def tapped(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        chunks: list[bytes] = []

        async def tap():
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    bodies.append(b"".join(chunks))
            return message
        await app(scope, tap, send)

    with serve(tapped) as url:
        yield url + "/v1", bodies


def config(store: str, base: str):
    models = {alias: {"model": f"openai/{behaviour}", "api_base": base,
                      "api_key_env": "FAKE_SERVER_KEY"}
              for alias, behaviour in (("echo", "echo"), ("tool-call", "tool-call"),
                                       ("messages", "echo-messages"))}
    return gateway_config(
        store, models=models,
        context={"max_context_tokens": 8000, "reserve_completion_tokens": 500},
        # Summaries after two rounds beyond one recent turn: a few turns make chunks.
        tenant={"memory": {"compaction": {"min_rounds": 2, "recent_window_turns": 1}}})


@pytest.fixture
def gateway(redis_url, upstream, monkeypatch) -> Iterator[str]:
    monkeypatch.setenv("FAKE_SERVER_KEY", "sk-fake")
    with running_gateway(config(redis_url, upstream[0])) as url:
        yield url


def sdk(url: str, conversation: str, tenant: str = "acme") -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=KEYS[tenant], max_retries=0,
                         default_headers={"X-Conversation-Id": conversation, "X-User-Id": USER})


def as_sent(message: Any) -> dict[str, Any]:
    """A reply as a client resends it (without its null fields)."""
    return message.model_dump(exclude_none=True)


def store_bytes(url: str) -> list[bytes]:
    """Every key name and every value in the database, whatever its type."""
    out: list[bytes] = []
    with redis.Redis.from_url(url) as r:
        for name in r.scan_iter(count=1000):
            out.append(name)
            kind = r.type(name).decode()
            if kind == "string":
                out.append(r.get(name))
            elif kind == "list":
                out.extend(r.lrange(name, 0, -1))
            elif kind == "hash":
                for field, value in r.hgetall(name).items():
                    out += [field, value]
            elif kind == "set":
                out.extend(r.smembers(name))
            elif kind == "zset":
                out.extend(member for member, _ in r.zrange(name, 0, -1, withscores=True))
            elif kind == "stream":
                for entry_id, fields in r.xrange(name):
                    out.append(entry_id)
                    for field, value in fields.items():
                        out += [field, value]
            elif kind != "none":  # none: deleted since the scan listed it
                raise AssertionError(f"{name!r}: a value of type {kind} the scan cannot read")
    return out


def append_only_files(url: str) -> list[Path]:
    """The store's append-only files when the store keeps them on this machine (the embedded
    Valkey and the tests' redis-server do)."""
    with redis.Redis.from_url(url, decode_responses=True) as r:
        settings = r.config_get("*")
    if settings.get("appendonly") != "yes":
        return []
    folder = Path(settings["dir"]) / settings.get("appenddirname", "")
    return [p for p in folder.rglob("*") if p.is_file()] if folder.is_dir() else []


def persisted(url: str, word: str) -> list[str]:
    """Where `word` occurs in the store: keys (SCAN) and append-only files."""
    needle = word.encode()
    found = [f"key value {blob[:60]!r}" for blob in store_bytes(url) if needle in blob]
    for path in append_only_files(url):
        if needle in path.read_bytes():
            found.append(str(path))
    return found


def transcript(url: str, conversation: str) -> list[Message]:
    """The conversation as a request would see it (applied and pending turns)."""
    async def load():
        client = connect(url)
        try:
            return await RedisStore(client).load(conversation_key(conversation, "acme", USER))
        finally:
            await client.aclose()
    return [s.message for s in asyncio.run(load())]


def wait_for(condition: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def request_lines(caplog) -> list[dict[str, Any]]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.request"]


def test_one_shot_content_reaches_the_upstream_and_no_byte_of_it_is_stored(
        gateway, upstream, redis_url, caplog):
    _, bodies = upstream
    client = sdk(gateway, "one-shot")
    caplog.set_level(logging.INFO, logger="gateway.request")
    history: list[dict[str, Any]] = [{"role": "system", "content": "Answer briefly."},
                                     {"role": "user", "content": "What is the keeper's code?"}]
    first = client.chat.completions.create(model="tool-call", messages=history, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    history += [as_sent(first.choices[0].message),
                {"role": "tool", "tool_call_id": call.id, "content": BIG_RESULT}]
    del bodies[:]
    second = client.chat.completions.create(model="echo", messages=history, tools=TOOLS)
    history += [as_sent(second.choices[0].message),
                {"role": "user", "content": DOCUMENT, MARKER: True},
                {"role": "user", "content": "Which word was it?"}]
    # Stateless again, streaming: the tool result resent in full, and a marked document.
    stream = client.chat.completions.create(model="echo", messages=history, tools=TOOLS,
                                            stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    # A stream's turn is recorded (and its line logged) as the stream closes: wait for it.
    wait_for(lambda: len(request_lines(caplog)) == 3)

    # The upstream got every one-shot message in full, and never the marker.
    sent = [json.loads(body) for body in bodies]
    assert len(sent) == 2
    for body in sent:
        assert {"role": "tool", "tool_call_id": call.id, "content": BIG_RESULT} \
            in body["messages"]
    assert {"role": "user", "content": DOCUMENT} in sent[1]["messages"]
    assert not [b for b in bodies if MARKER.encode() in b]

    # A stateful follow-up (no resend) gets the stored placeholders, never the content.
    del bodies[:]
    client.chat.completions.create(model="echo", messages=[
        {"role": "user", "content": "Thanks, and the weather?"}])
    wait_for(lambda: len(request_lines(caplog)) == 4)
    assert TOOL_CANARY.encode() not in bodies[0] and DOC_CANARY.encode() not in bodies[0]
    assert f"[one-shot tool result, {len(BIG_RESULT):,} chars, not stored]".encode() in bodies[0]

    # No byte of either anywhere in the store — transcript, record stream, recall indexes,
    # summaries, facts, profile — while the rest of the conversation is there.
    for word in (TOOL_CANARY, DOC_CANARY):
        assert persisted(redis_url, word) == []
    assert append_only_files(redis_url) or os.environ.get(ENV_URL)  # searched too
    assert persisted(redis_url, "keeper's code?")

    stored = transcript(redis_url, "one-shot")
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant", "user",
                                        "user", "assistant", "user", "assistant"]
    assert stored[2].content == f"[one-shot tool result, {len(BIG_RESULT):,} chars, not stored]"
    assert stored[2].get("tool_call_id") == call.id  # the pairing stays valid
    assert stored[4].content == f"[one-shot message, {len(DOCUMENT):,} chars, not stored]"

    lines = request_lines(caplog)
    assert [line.get("reconcile") for line in lines] == ["new", "stateless", "stateless",
                                                         "stateful"]
    assert [line.get("one_shot_messages") for line in lines] == [None, 1, 2, None]


def test_a_tool_result_below_the_threshold_is_stored(gateway, upstream, redis_url):
    client = sdk(gateway, "small")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Look it up."}]
    first = client.chat.completions.create(model="tool-call", messages=messages, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    messages += [as_sent(first.choices[0].message),
                 {"role": "tool", "tool_call_id": call.id, "content": f"Found {SMALL_CANARY}."}]
    client.chat.completions.create(model="echo", messages=messages, tools=TOOLS)
    assert persisted(redis_url, SMALL_CANARY)
    stored = transcript(redis_url, "small")
    assert stored[2].content == f"Found {SMALL_CANARY}."


def test_one_shot_content_of_one_tenant_reaches_no_other(gateway, upstream):
    acme, globex = sdk(gateway, "shared-id"), sdk(gateway, "shared-id", tenant="globex")
    acme.chat.completions.create(model="echo", messages=[
        {"role": "user", "content": DOCUMENT, MARKER: True},
        {"role": "user", "content": "Keep this between us."}])
    seen = globex.chat.completions.create(model="messages", messages=[
        {"role": "user", "content": "What did I send before?"}])
    text = seen.choices[0].message.content
    assert DOC_CANARY not in text and "one-shot" not in text
    assert json.loads(text) == [{"role": "user", "content": "What did I send before?"}]


def test_a_marker_that_is_not_a_boolean_is_refused_in_openais_shape(gateway):
    response = httpx.post(gateway + "/v1/chat/completions", timeout=30, json={
        "model": "echo", "messages": [{"role": "user", "content": "x", MARKER: 1}]},
        headers={"Authorization": f"Bearer {KEYS['acme']}", "X-Conversation-Id": "bad"})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == f"messages[0].{MARKER}"


def test_a_turn_held_while_the_store_is_down_is_stored_with_its_placeholder(
        tmp_path, upstream, monkeypatch):
    """The fail-open path: the request is forwarded as sent while Redis is stopped, its turn
    waits in the record buffer and is stored when Redis is back — as placeholders."""
    require_redis_server()
    monkeypatch.setenv("FAKE_SERVER_KEY", "sk-fake")
    base, bodies = upstream
    with Processes(tmp_path) as procs:
        server = procs.redis()
        settings = config(server.url, base).model_dump(mode="json")
        settings["recorder"] = {"mode": "background", "buffer_retry_max_seconds": 0.2}
        settings["server"] = {"store_timeout_seconds": 0.5}
        with running_gateway(parse_config(settings)) as url:
            server.stop()
            del bodies[:]
            response = sdk(url, "outage").chat.completions.with_raw_response.create(
                model="echo", messages=[{"role": "user", "content": DOCUMENT, MARKER: True},
                                        {"role": "user", "content": "Noted?"}])
            assert response.headers["x-gateway-passthrough"] == "store_unavailable"
            assert DOC_CANARY.encode() in bodies[0] and MARKER.encode() not in bodies[0]
            server.start()
            deadline = time.monotonic() + 20
            while len(stored := transcript(server.url, "outage")) < 3:
                assert time.monotonic() < deadline, "the buffered turn was never stored"
                time.sleep(0.1)
        assert [m.text for m in stored] == [
            f"[one-shot message, {len(DOCUMENT):,} chars, not stored]", "Noted?", "Noted?"]
        assert persisted(server.url, DOC_CANARY) == []
        assert append_only_files(server.url)  # the AOF was searched too

