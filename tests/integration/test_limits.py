"""Request limits: a request beyond one gets a 400 in OpenAI's error shape naming the field,
and is neither forwarded nor recorded; a request at the limit is served.

The real app over HTTP (uvicorn on loopback), a real store, the real openai SDK as client.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import openai
import pytest

from gateway.config import hash_key, parse_config
from gateway.errors import ConfigError
from gateway.store import connect
from gateway.store.redis_store import RedisStore
from tests.support.gateway import KEYS, MODELS, conversation_key, gateway_config, running_gateway

AUTH = {"Authorization": f"Bearer {KEYS['acme']}"}


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _turns(n: int) -> list[dict[str, Any]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"}
            for i in range(n - 1)] + [_user("last")]


@pytest.fixture
def default_url(redis_url):
    with running_gateway(gateway_config(redis_url)) as url:
        yield url


@pytest.fixture
def small_url(redis_url):
    """Top-level limits of 8 messages and 100 characters; tenant globex allows 3 messages."""
    config = parse_config({
        "store": redis_url,
        "recorder": {"mode": "inline"},
        "memory": {"embedder": {"kind": "hash"}},
        "request_limits": {"max_messages": 8, "max_message_chars": 100},
        "tenants": {name: {"api_keys": [{"sha256": hash_key(key)}], "models": MODELS,
                           **({"request_limits": {"max_messages": 3}} if name == "globex" else {})}
                    for name, key in KEYS.items()},
    })
    with running_gateway(config) as url:
        yield url


def _post(url: str, messages: list[dict[str, Any]], key: str = "acme",
          **headers: str) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", timeout=60,
                      json={"model": "echo", "messages": messages},
                      headers={"Authorization": f"Bearer {KEYS[key]}", **headers})


def _error(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 400, response.text[:300]
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    return error


def test_a_request_of_100000_messages_is_a_400_naming_messages_and_nothing_is_stored(
        default_url, redis_url):
    client = openai.OpenAI(base_url=default_url + "/v1", api_key=KEYS["acme"], max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        # The messages go in `extra_body`, which replaces the `messages` key of the body as
        # sent: the same JSON on the wire, without the SDK's client-side type walk over
        # 100,000 dicts (15-55 s on 2 cores; the gateway answers in under a second).
        client.chat.completions.create(model="echo", messages=[],
                                       extra_body={"messages": _turns(100_000)},
                                       extra_headers={"X-Conversation-Id": "huge"})
    assert info.value.status_code == 400
    assert info.value.code == "array_above_max_length" and info.value.param == "messages"
    assert "maximum length 2048" in info.value.message and "100000" in info.value.message

    async def stored() -> int:
        redis = connect(redis_url)
        try:
            return len(await RedisStore(redis).load(conversation_key("huge")))
        finally:
            await redis.aclose()

    assert asyncio.run(stored()) == 0


def test_2048_messages_are_answered(default_url):
    response = _post(default_url, _turns(2048))
    assert response.status_code == 200, response.text[:300]
    assert response.json()["choices"][0]["message"]["content"] == "last"


def test_a_message_over_a_million_characters_is_a_400_naming_its_content(default_url):
    error = _error(_post(default_url, [_user("hi"), _user("x" * 1_000_001)]))
    assert error["param"] == "messages[1].content"
    assert error["code"] == "string_above_max_length"
    assert "maximum length 1000000" in error["message"]


@pytest.mark.parametrize("content, status", [
    ("x" * 100, 200),
    ("x" * 101, 400),
    ([{"type": "text", "text": "x" * 60}, {"type": "text", "text": "y" * 40}], 200),
    ([{"type": "text", "text": "x" * 60}, {"type": "text", "text": "y" * 41}], 400),
    ("界" * 100, 200),  # characters, not bytes (300 bytes of UTF-8)
])
def test_max_message_chars_counts_the_text_of_one_message(small_url, content, status):
    response = _post(small_url, [{"role": "system", "content": "s"},
                                 {"role": "user", "content": content}])
    if status == 200:
        assert response.status_code == 200, response.text[:300]
    else:
        error = _error(response)
        assert error["param"] == "messages[1].content"
        assert error["code"] == "string_above_max_length"


def test_a_tenant_overrides_only_the_limits_it_sets(small_url):
    assert _post(small_url, _turns(8)).status_code == 200  # acme: the top-level 8
    assert _error(_post(small_url, _turns(9)))["param"] == "messages"
    assert _post(small_url, _turns(3), key="globex").status_code == 200
    error = _error(_post(small_url, _turns(4), key="globex"))
    assert error["param"] == "messages" and "maximum length 3" in error["message"]
    # globex keeps the top-level character limit it did not override
    assert _error(_post(small_url, [_user("x" * 101)], key="globex"))["param"] \
        == "messages[0].content"


@pytest.mark.parametrize("limits, key", [
    ({"max_messages": 0}, "request_limits.max_messages"),
    ({"max_message_chars": 0}, "request_limits.max_message_chars"),
    ({"max_mesages": 10}, "request_limits.max_mesages"),
])
def test_bad_limits_fail_at_start_naming_the_key(limits, key):
    tenant = {"api_keys": [{"sha256": hash_key("k")}], "models": {"m": {"model": "fake/echo"}}}
    with pytest.raises(ConfigError) as top:
        parse_config({"request_limits": limits, "tenants": {"acme": tenant}})
    assert key in str(top.value)
    with pytest.raises(ConfigError) as own:
        parse_config({"tenants": {"acme": {**tenant, "request_limits": limits}}})
    assert f"tenants.acme.{key}" in str(own.value)
