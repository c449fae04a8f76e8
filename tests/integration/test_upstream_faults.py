"""Upstream faults reach the client as the upstream's status or a clean 502/504 in OpenAI's
error shape, and no partial reply is ever recorded as complete.

The gateway (real HTTP, real store) talks to a misbehaving upstream served on loopback: slow,
429, 500, a stream cut off midway; and to a port nobody listens on — once over the direct
path, once through litellm (forced by a route's `litellm_params`).
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from gateway.store import connect
from gateway.store.redis_store import RedisStore
from tests.support.gateway import KEYS, conversation_key, gateway_config, running_gateway
from tests.support.processes import report
from tests.support.servers import closed_port, serve

AUTH = {"Authorization": f"Bearer {KEYS['acme']}"}


def _chunk(content: str, finish: str | None = None) -> bytes:
    payload = {"id": "chatcmpl-faulty", "object": "chat.completion.chunk", "created": 0,
               "model": "faulty", "choices": [{"index": 0, "delta": {"content": content},
                                               "finish_reason": finish}]}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def faulty_upstream() -> Starlette:
    async def chat(request: Request) -> Response:
        body = await request.json()
        model = body["model"]
        if model == "slow":
            await asyncio.sleep(3)
        if model.startswith("status-"):
            status = int(model[7:])
            return JSONResponse({"error": {"message": f"upstream says {status}",
                                           "type": "server_error", "param": None,
                                           "code": f"code_{status}"}}, status_code=status)
        if model == "cut":
            async def cut():
                yield _chunk("partial ")
                yield _chunk("answer ")
                await asyncio.sleep(0.05)
                raise RuntimeError("upstream connection dropped mid-stream")
            return StreamingResponse(cut(), media_type="text/event-stream")
        return JSONResponse({"error": {"message": "unknown"}}, status_code=400)

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


@pytest.fixture(scope="module")
def upstream_url():
    with serve(faulty_upstream()) as url:
        yield url + "/v1"


# Any litellm_params keep a route on litellm; this one changes nothing (litellm's own value).
LITELLM_ONLY = {"litellm_params": {"max_retries": 0}}


def _models(base: str, path: str) -> dict:
    forced = LITELLM_ONLY if path == "litellm" else {}
    route = {"api_base": base, "api_key_env": "FAULTY_KEY", "timeout_seconds": 1.0, **forced}
    return {"slow-up": {"model": "openai/slow", **route},
            "limited": {"model": "openai/status-429", **route},
            "broken": {"model": "openai/status-500", **route},
            "cut": {"model": "openai/cut", **route},
            "refused": {"model": "openai/echo", "api_key_env": "FAULTY_KEY",
                        "api_base": f"http://127.0.0.1:{closed_port()}/v1", **forced}}


CASES = [("slow-up", False, 504), ("limited", False, 429), ("broken", False, 500),
         ("refused", False, 502), ("slow-up", True, 504), ("limited", True, 429),
         ("refused", True, 502)]


async def _stored(redis_url: str, conversation: str):
    client = connect(redis_url)
    try:
        return await RedisStore(client).load(conversation_key(conversation))
    finally:
        await client.aclose()


@pytest.mark.parametrize("path", ["direct", "litellm"])
def test_upstream_faults_give_clean_errors_and_record_nothing_complete(redis_url, upstream_url,
                                                                       monkeypatch, path):
    monkeypatch.setenv("FAULTY_KEY", "unused")
    config = gateway_config(redis_url, models=_models(upstream_url, path))
    results = {}
    with running_gateway(config) as url, httpx.Client(timeout=30) as client:
        for model, stream, expected in CASES:
            name = f"fault-{model}-{'stream' if stream else 'json'}"
            response = client.post(url + "/v1/chat/completions",
                                   headers={**AUTH, "X-Conversation-Id": name},
                                   json={"model": model, "stream": stream,
                                         "messages": [{"role": "user", "content": "hi"}]})
            error = response.json().get("error", {})
            results[name] = response.status_code
            assert response.status_code == expected, (name, response.text)
            assert set(error) >= {"message", "type", "param", "code"}, response.text
            assert asyncio.run(_stored(redis_url, name)) == ()

        # Cut mid-stream: the client has its 200 and the chunks so far, then an error event
        # and no [DONE]; the partial reply is stored, marked incomplete.
        with client.stream("POST", url + "/v1/chat/completions",
                           headers={**AUTH, "X-Conversation-Id": "fault-cut"},
                           json={"model": "cut", "stream": True,
                                 "messages": [{"role": "user", "content": "hi"}]}) as r:
            text = b"".join(r.iter_bytes()).decode()
        # A stream's turn is recorded after its last chunk is sent: wait for it, not the clock.
        deadline = time.monotonic() + 10
        while not (stored := asyncio.run(_stored(redis_url, "fault-cut"))) \
                and time.monotonic() < deadline:
            time.sleep(0.02)
    results["fault-cut"] = r.status_code
    report(f"upstream faults ({path})", **results,
           cut_reply_stored_incomplete=bool(stored) and stored[-1].incomplete)
    assert r.status_code == 200 and "partial" in text
    assert '"error"' in text and "[DONE]" not in text
    assert [m.message.role for m in stored] == ["user", "assistant"]
    assert stored[1].incomplete and stored[1].message.text.startswith("partial")
