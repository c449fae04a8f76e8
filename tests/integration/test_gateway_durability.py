"""Nothing the gateway was told is lost: restarts, background recording, hang-ups, concurrency."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from gateway.store import connect
from gateway.store.redis_store import RedisStore
from tests.support.gateway import KEYS, conversation_key, forwarded, gateway_config, \
    running_gateway

AUTH = {"Authorization": f"Bearer {KEYS['acme']}"}


def user(text):
    return {"role": "user", "content": text}


async def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = await predicate()
        if result:
            return result
        await asyncio.sleep(0.05)
    raise AssertionError("condition not reached in time")


def test_embedded_store_persists_across_gateway_restart(tmp_path):
    config = gateway_config("embedded", server={"data_dir": str(tmp_path / "data")},
                            recorder={"mode": "background"})
    with running_gateway(config) as url:
        response = httpx.post(url + "/v1/chat/completions", timeout=30,
                              headers={**AUTH, "X-Conversation-Id": "kept"},
                              json={"model": "echo", "messages": [user("remember the 14th")]})
        assert response.status_code == 200
    # Shut down (the recorder drained); a new gateway on the same data dir remembers.
    with running_gateway(config) as url:
        response = httpx.post(url + "/v1/chat/completions", timeout=30,
                              headers={**AUTH, "X-Conversation-Id": "kept"},
                              json={"model": "messages", "messages": [user("what date?")]})
    seen = [m["content"] for m in forwarded(response.json()["choices"][0]["message"]["content"])]
    assert seen == ["remember the 14th", "remember the 14th", "what date?"]


async def test_client_hanging_up_mid_stream_still_records_the_turn(redis_url):
    config = gateway_config(redis_url, recorder={"mode": "background"},
                            models={"slow": {"model": "fake/slow-1000"}})
    with running_gateway(config) as url:
        async with httpx.AsyncClient(timeout=30) as client:
            async with client.stream("POST", url + "/v1/chat/completions",
                                     headers={**AUTH, "X-Conversation-Id": "hangup"},
                                     json={"model": "slow", "stream": True,
                                           "messages": [user("a long answer please")]}) as r:
                assert r.status_code == 200
                async for _ in r.aiter_bytes():
                    break  # hang up after the first bytes
        redis = connect(redis_url)
        store = RedisStore(redis)
        try:
            stored = await wait_for(lambda: _loaded_with(store, "hangup", 2))
        finally:
            await redis.aclose()
    assert stored[0].message.text == "a long answer please"
    assert stored[1].message.role == "assistant" and stored[1].incomplete
    assert len(stored[1].message.text) < len("a long answer please")


async def _loaded_with(store, conversation, n):
    stored = await store.load(conversation_key(conversation))
    return stored if len(stored) >= n else None


async def test_concurrent_stateful_requests_on_one_conversation_lose_no_message(redis_url):
    config = gateway_config(redis_url, recorder={"mode": "background", "workers": 2})
    n = 25
    with running_gateway(config) as url:
        async with httpx.AsyncClient(timeout=30) as client:
            responses = await asyncio.gather(*(
                client.post(url + "/v1/chat/completions",
                            headers={**AUTH, "X-Conversation-Id": "busy"},
                            json={"model": "echo", "messages": [user(f"message {i}")]})
                for i in range(n)))
        assert all(r.status_code == 200 for r in responses)
        redis = connect(redis_url)
        store = RedisStore(redis)
        try:
            await wait_for(lambda: _all_applied(store, "busy"))
            stored = await store.load(conversation_key("busy"))
        finally:
            await redis.aclose()
    texts = [s.message.text for s in stored]
    assert sorted(texts[0::2]) == sorted(f"message {i}" for i in range(n))
    assert texts[0::2] == texts[1::2]  # every reply directly follows its own question


async def _all_applied(store, conversation):
    return await store.pending_count(conversation_key(conversation)) == 0


@pytest.mark.parametrize("stream", [False, True])
def test_stateless_resend_after_background_record_stores_each_message_once(redis_url, stream):
    config = gateway_config(redis_url, recorder={"mode": "background"})
    history = []
    with running_gateway(config) as url:
        for turn in range(5):
            history.append(user(f"q{turn}"))
            response = httpx.post(url + "/v1/chat/completions", timeout=30,
                                  headers={**AUTH, "X-Conversation-Id": "resend"},
                                  json={"model": "echo", "messages": history, "stream": stream})
            assert response.status_code == 200
            history.append({"role": "assistant", "content": f"q{turn}"})

    async def check():
        redis = connect(redis_url)
        try:
            return await RedisStore(redis).load(conversation_key("resend"))
        finally:
            await redis.aclose()
    stored = asyncio.run(check())
    assert [s.message.text for s in stored] == [m["content"] for m in history]
