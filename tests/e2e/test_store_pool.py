"""The store's connection pool is bounded and blocking: a burst of concurrent requests beyond
its size waits for a connection (within the store timeout) instead of running without memory.

A real store (the embedded Valkey), a real `gateway serve` process for the 200-client burst.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import redis

from gateway.config import ServerConfig
from gateway.store import connect
from tests.support.processes import AUTH, Processes, gateway_config_file, report

CLIENTS = 200


async def test_calls_beyond_the_pool_size_wait_for_a_connection(redis_url):
    client = connect(redis_url, max_connections=2, pool_timeout=5)
    try:
        # Each call holds its connection 50 ms; 20 at once through 2 connections.
        results = await asyncio.gather(*(client.blpop([f"absent-{i}"], timeout=0.05)
                                         for i in range(20)))
        stats = client.connection_pool.stats()
    finally:
        await client.aclose()
    assert results == [None] * 20
    assert stats.max_connections == 2 and stats.in_use == 0
    assert stats.waits >= 18 and stats.timeouts == 0


async def test_a_wait_past_the_pool_timeout_fails_and_is_counted(redis_url):
    client = connect(redis_url, max_connections=1, pool_timeout=0.2)
    try:
        held = asyncio.create_task(client.blpop(["absent"], timeout=1))
        await asyncio.sleep(0.1)
        with pytest.raises(redis.ConnectionError):
            await client.ping()
        await held
        stats = client.connection_pool.stats()
    finally:
        await client.aclose()
    assert stats.waits == 1 and stats.timeouts == 1


def test_pool_size_is_validated_config():
    assert ServerConfig().store_pool_size == 100
    with pytest.raises(ValueError, match="store_pool_size"):
        ServerConfig(store_pool_size=0)


def test_200_concurrent_clients_on_one_worker_all_get_memory(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("pool")
    # A pool far smaller than the burst: the old non-blocking pool failed every call beyond it.
    config = gateway_config_file(workdir / "config.yaml", "embedded",
                                 server={"store_pool_size": 8})
    with Processes(workdir) as procs:
        gateway = procs.gateway(config, workers=1)

        async def burst() -> list[httpx.Response]:
            limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=0)
            async with httpx.AsyncClient(timeout=60, limits=limits) as client:
                async def one(i: int) -> httpx.Response:
                    return await client.post(
                        gateway.url + "/v1/chat/completions",
                        json={"model": "echo", "messages": [{"role": "user",
                                                             "content": f"burst-{i}#0"}]},
                        headers={**AUTH, "X-Conversation-Id": f"burst-{i}",
                                 "Connection": "close"})
                return await asyncio.gather(*(one(i) for i in range(CLIENTS)))

        responses = asyncio.run(burst())
        ready = httpx.get(gateway.url + "/readyz", timeout=10).json()
        metrics = httpx.get(gateway.url + "/metrics", timeout=10).text
        log = gateway.log_text()

    statuses = [r.status_code for r in responses]
    without_memory = [r.headers["x-gateway-passthrough"] for r in responses
                      if "x-gateway-passthrough" in r.headers]
    logged = sum(1 for line in log.splitlines() if line.startswith("{")
                 and json.loads(line).get("passthrough") == "store_unavailable")
    pool = ready["store_pool"]
    report(f"{CLIENTS} concurrent clients, one worker, store_pool_size 8",
           ok=statuses.count(200), without_memory=len(without_memory),
           logged_store_unavailable=logged, pool_waits=pool["waits"],
           pool_timeouts=pool["timeouts"])
    assert statuses == [200] * CLIENTS
    assert without_memory == [] and logged == 0
    assert pool["max_connections"] == 8 and pool["timeouts"] == 0
    assert "gateway_store_pool_max_connections 8.0" in metrics
    assert "gateway_store_pool_waits" in metrics
