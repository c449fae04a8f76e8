"""Fixtures for tests that start the bundled store (gateway/store/embedded.py) themselves:
a short data dir, the stores a test started (stopped even when it fails), and a client of
one."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
import redis

from gateway.store.embedded import EmbeddedRedis


@pytest.fixture
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("emb")  # short: the socket path must fit in 107 bytes


@pytest.fixture
def servers() -> Iterator[list[EmbeddedRedis]]:
    """Servers a test started; stopped even when the test fails."""
    started: list[EmbeddedRedis] = []
    yield started
    for server in started:
        server.stop()


def client_of(server: EmbeddedRedis) -> redis.Redis:
    return redis.Redis(unix_socket_path=str(server.socket_path), decode_responses=True)
