"""Real store servers for tests (nothing in this repo mocks Redis).

Fixtures:
- `redis_server_url` (session): URL of one server for the whole run — the embedded Valkey,
  started in a temporary data dir and stopped at the end; or, when the environment variable
  GATEWAY_TEST_REDIS_URL is set (e.g. `redis://127.0.0.1:6399/0`), that external server,
  so the same tests prove compatibility with real Redis.
- `redis_url` (function): the same URL, after FLUSHDB — each test starts with an empty
  database. Tests must not run in parallel against one server.
- `redis_client` (function, async): a `redis.asyncio` client for `redis_url` made by
  `gateway.store.connect` (decoded responses); closed after the test.
"""

from __future__ import annotations

import os
from typing import AsyncIterator, Iterator

import pytest
import redis
import redis.asyncio

from gateway.store import EmbeddedRedis, connect

ENV_URL = "GATEWAY_TEST_REDIS_URL"


@pytest.fixture(scope="session")
def redis_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get(ENV_URL)
    if external:
        yield external
        return
    # A short dir: the unix socket path must fit in 107 bytes.
    # die_with_parent: a test run that is killed leaves no server behind.
    server = EmbeddedRedis(tmp_path_factory.mktemp("store"), die_with_parent=True)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server_url: str) -> str:
    with redis.Redis.from_url(redis_server_url) as client:
        client.flushdb()
    return redis_server_url


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    client = connect(redis_url)
    try:
        yield client
    finally:
        await client.aclose()
