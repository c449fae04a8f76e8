"""Rate limits over HTTP, against the real gateway and a real store: a request over a limit
gets OpenAI's 429 with Retry-After, is not forwarded and not recorded; other tenants and keys
are unaffected; replicas share the count; tokens count what is forwarded plus the completion;
a store that cannot be reached admits requests (fail open)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai
import pytest
import redis

from gateway.config import hash_key, parse_config
from gateway.core.ids import ANONYMOUS_USER, ConversationKey
from gateway.store import RedisStore, connect
from tests.support.gateway import MODELS, data_dir, running_gateway
from tests.support.processes import API_KEY, Processes, gateway_config_file
from tests.support.servers import closed_port

KEYS = {"acme": "acme-key", "globex": "globex-key", "acme-batch": "acme-batch-key"}


def limited_config(store: str, *, acme: dict[str, Any] | None = None,
                   batch_key: dict[str, Any] | None = None, shards: int = 0,
                   recorder: dict[str, Any] | None = None):
    """acme (two keys: `acme-key`, and `acme-batch-key` with `batch_key` limits) with the
    tenant limits `acme`; globex without limits. `shards`: `store` is a cluster's node."""
    tenant = {"models": MODELS,
              "context": {"max_context_tokens": 2000, "reserve_completion_tokens": 200}}
    return parse_config({
        # A temporary data dir: a turn the store cannot take goes to a record journal there,
        # never into the working directory's ./data (which the next `gateway serve` replays).
        "server": {"data_dir": data_dir()},
        "store": store, "recorder": {"mode": "inline", **(recorder or {})},
        **({"store_cluster": {"enabled": True, "shards": shards}} if shards else {}),
        "memory": {"embedder": {"kind": "hash"}},
        "tenants": {
            "acme": {**tenant, "rate_limits": acme or {},
                     "api_keys": [{"sha256": hash_key(KEYS["acme"])},
                                  {"sha256": hash_key(KEYS["acme-batch"]),
                                   "rate_limits": batch_key or {}}]},
            "globex": {**tenant, "api_keys": [{"sha256": hash_key(KEYS["globex"])}]}}})


def client(url: str, key: str = "acme", conversation: str = "limited") -> openai.OpenAI:
    # max_retries=0: the SDK would otherwise wait out Retry-After and try again.
    return openai.OpenAI(base_url=url + "/v1", api_key=KEYS[key], max_retries=0,
                         default_headers={"X-Conversation-Id": conversation})


def ask(sdk: openai.OpenAI, text: str, **kwargs: Any) -> str:
    reply = sdk.chat.completions.create(model="echo", messages=[{"role": "user", "content": text}],
                                        **kwargs)
    return reply.choices[0].message.content or ""


def transcript(redis_url: str, conversation: str,
               tenant: str = "acme") -> list[tuple[str, str]]:
    import asyncio

    async def load() -> list[tuple[str, str]]:
        client = connect(redis_url)
        try:
            stored = await RedisStore(client).load(
                ConversationKey(tenant, ANONYMOUS_USER, conversation))
            return [(m.message.role, m.message.text) for m in stored]
        finally:
            await client.aclose()
    return asyncio.run(load())


def rate_limited(call: Any) -> openai.RateLimitError:
    with pytest.raises(openai.RateLimitError) as caught:
        call()
    error = caught.value
    assert set(error.body) == {"message", "type", "param", "code"}  # OpenAI's shape
    assert error.body["code"] == "rate_limit_exceeded"
    return error


def test_the_request_over_the_limit_gets_429_with_retry_after_and_is_not_recorded(redis_url):
    with running_gateway(limited_config(redis_url, acme={"requests_per_minute": 5})) as url:
        acme = client(url)
        for n in range(5):
            assert ask(acme, f"question {n}", stream=False) == f"question {n}"
        error = rate_limited(lambda: ask(acme, "question 5"))
        assert error.body["type"] == "requests"
        assert "Limit 5, Used 5, Requested 1" in error.body["message"]
        retry_after = int(error.response.headers["retry-after"])
        assert 1 <= retry_after <= 60
        # A stream is refused before it starts, the same way.
        rate_limited(lambda: list(acme.chat.completions.create(
            model="echo", stream=True, messages=[{"role": "user", "content": "question 6"}])))
        # Not forwarded, not recorded: the transcript holds the five admitted turns only.
        assert transcript(redis_url, "limited") == [
            (role, f"question {n}") for n in range(5) for role in ("user", "assistant")]
        # Another tenant is unaffected.
        globex = client(url, "globex")
        assert [ask(globex, f"g{n}") for n in range(7)] == [f"g{n}" for n in range(7)]
        metrics = httpx.get(url + "/metrics", timeout=10).text
        assert 'gateway_rate_limited_total{kind="requests",tenant="acme"} 2.0' in metrics


@pytest.mark.parametrize("store", ["valkey", "valkey-cluster"])
def test_a_key_limit_applies_to_that_key_alone_and_the_tenant_limit_to_all(store, request):
    # On a cluster the key's and the tenant's counters are checked in one script: they
    # share the tenant's hash tag.
    cluster = store == "valkey-cluster"
    url = request.getfixturevalue("cluster_url" if cluster else "redis_url")
    config = limited_config(url, acme={"requests_per_minute": 4},
                            batch_key={"requests_per_minute": 2}, shards=4 if cluster else 0)
    with running_gateway(config) as url:
        batch, main = client(url, "acme-batch"), client(url, "acme")
        ask(batch, "b0"), ask(batch, "b1")
        error = rate_limited(lambda: ask(batch, "b2"))
        assert "this API key" in error.body["message"]
        ask(main, "m0"), ask(main, "m1")          # the tenant's 3rd and 4th request
        error = rate_limited(lambda: ask(main, "m2"))
        assert "tenant acme" in error.body["message"]


def _tokens_counted(redis_url: str) -> int:
    with redis.Redis.from_url(redis_url, decode_responses=True) as r:
        return sum(int(v) for v in r.hgetall(
            "gw:rl:4:acme:tenant:tokens").values())


def _wait_counted(redis_url: str, expected: int, timeout: float = 10) -> None:
    """The completion tokens are added after the answer, in the background: poll for them."""
    deadline = time.monotonic() + timeout
    while _tokens_counted(redis_url) < expected and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _tokens_counted(redis_url) == expected


def test_tokens_count_the_forwarded_prompt_and_then_the_completion(redis_url):
    config = limited_config(redis_url, acme={"tokens_per_minute": 50})
    with running_gateway(config) as url:
        acme = openai.OpenAI(base_url=url + "/v1", api_key=KEYS["acme"], max_retries=0)
        first = acme.chat.completions.with_raw_response.create(
            model="echo", messages=[{"role": "user", "content": "one two three " * 5}])
        prompt = int(first.headers["x-gateway-tokens-forwarded"])
        completion = first.parse().usage.completion_tokens
        assert prompt > 10 and completion > 10
        _wait_counted(redis_url, prompt + completion)
        # Fits by prompt tokens alone, not with the first answer's completion counted too.
        assert 2 * prompt <= 50 < 2 * prompt + completion
        error = rate_limited(lambda: acme.chat.completions.create(
            model="echo", messages=[{"role": "user", "content": "one two three " * 5}]))
        assert error.body["type"] == "tokens"
        assert "retry-after" in error.response.headers
        # One request larger than the whole limit can never pass: no Retry-After.
        error = rate_limited(lambda: acme.chat.completions.create(
            model="echo", messages=[{"role": "user", "content": "word " * 60}]))
        assert "Request too large" in error.body["message"]
        assert "retry-after" not in error.response.headers


def test_a_tenant_without_limits_costs_no_store_call(redis_url):
    with running_gateway(limited_config(redis_url, acme={"requests_per_minute": 1})) as url:
        for n in range(3):
            ask(client(url, "globex"), f"g{n}")
        with redis.Redis.from_url(redis_url) as r:
            assert list(r.scan_iter("gw:rl:*")) == []
            # ... and nothing counted the limited tenant's idle key either.
        ask(client(url), "a0")
        with redis.Redis.from_url(redis_url) as r:
            assert {k.decode() for k in r.scan_iter("gw:rl:*")} == {
                "gw:rl:4:acme:tenant:requests"}


def test_limits_fail_open_when_the_store_cannot_be_reached(caplog):
    # A short drain: at shutdown the record buffer waits that long for a store that never
    # comes (the default 10 s), then journals the turns; the limits are what is tested here.
    config = limited_config(f"redis://127.0.0.1:{closed_port()}/0",
                            acme={"requests_per_minute": 1, "tokens_per_minute": 5},
                            recorder={"drain_timeout_seconds": 0.5})
    with running_gateway(config) as url:
        acme = client(url)
        assert [ask(acme, f"q{n}") for n in range(3)] == ["q0", "q1", "q2"]
    assert "rate limits unavailable, admitting the request" in caplog.text


def test_two_replicas_share_the_count(tmp_path):
    with Processes(tmp_path) as procs:
        server = procs.redis()
        config = gateway_config_file(tmp_path / "config.yaml", server.url,
                                     recorder={"mode": "background"})
        data = config.read_text().replace(
            "  acme:\n", "  acme:\n    rate_limits: {requests_per_minute: 5}\n", 1)
        config.write_text(data)
        a, b = procs.gateway(config), procs.gateway(config)
        statuses = []
        with httpx.Client(timeout=20) as http:
            for n, replica in enumerate((a, b, a, b, a, b, a)):
                response = http.post(replica.url + "/v1/chat/completions",
                                     headers={"Authorization": f"Bearer {API_KEY}"},
                                     json={"model": "echo",
                                           "messages": [{"role": "user", "content": f"r{n}"}]})
                statuses.append(response.status_code)
                if response.status_code == 429:
                    assert 1 <= int(response.headers["retry-after"]) <= 60
                    assert response.json()["error"]["type"] == "requests"
        assert statuses == [200] * 5 + [429, 429]


@pytest.mark.parametrize("patch, where", [
    ({"rate_limits": {"requests_per_minute": 0}}, "tenants.acme.rate_limits.requests_per_minute"),
    ({"rate_limits": {"tokens_per_min": 10}}, "tenants.acme.rate_limits.tokens_per_min"),
    ({"api_keys": [{"env": "X", "rate_limits": {"requests_per_minute": -1}}]},
     "tenants.acme.api_keys.0.rate_limits.requests_per_minute"),
])
def test_bad_limits_fail_at_start_up_naming_the_key(patch, where):
    from gateway.errors import ConfigError

    data = limited_config("embedded").model_dump(mode="json", exclude_defaults=True)
    data["tenants"]["acme"].update(patch)
    with pytest.raises(ConfigError, match=where.replace(".", r"\.")):
        parse_config(data)


def test_admin_keys_take_no_limits():
    from gateway.errors import ConfigError

    data = limited_config("embedded").model_dump(mode="json", exclude_defaults=True)
    data["admin"] = {"keys": [{"sha256": "0" * 64, "rate_limits": {"requests_per_minute": 1}}]}
    with pytest.raises(ConfigError, match=r"admin\.keys\.0\.rate_limits: Extra inputs"):
        parse_config(data)
