"""The embedded store's supervisor: a crashed server is reaped and started again on the same
data dir, with its data; restarts back off; a stopped supervisor restarts nothing.

The real bundled Valkey, real signals; polls are bounded, nothing asserts a duration.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

import pytest

from gateway.store.embedded import EmbeddedRedis
from gateway.store.supervisor import StoreSupervisor
from tests.support.embedded import client_of


def _state(pid: int) -> str | None:
    """The process's state letter (Z: a zombie), None once it is gone (reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return None


def _until(condition: Callable[[], object], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def _server_pid(data_dir: Path) -> int | None:
    try:
        return int((data_dir / "redis.pid").read_text())
    except (OSError, ValueError):
        return None


def _events(caplog: pytest.LogCaptureFixture, name: str) -> list[dict[str, object]]:
    found = []
    for record in caplog.records:
        message = record.msg if isinstance(record.msg, dict) else None
        if message is None:
            try:
                message = json.loads(record.getMessage())
            except ValueError:
                continue
        if message.get("event") == name:
            found.append(message)
    return found


def _restarted(supervisor: StoreSupervisor, count: int) -> Callable[[], bool]:
    """The supervisor's `count`th restart is done and the new server answers."""
    return lambda: supervisor.restarts == count and supervisor.store.probe() == "ready"


def test_a_store_killed_with_9_is_reaped_and_restarted_with_its_data(data_dir, servers,
                                                                     caplog):
    caplog.set_level(logging.INFO, logger="gateway.store.embedded")
    store = EmbeddedRedis(data_dir)
    servers.append(store)
    store.start()
    with client_of(store) as client:
        client.rpush("gw:acked", *[f"turn-{n}" for n in range(100)])
    old = store.pid
    assert old is not None
    with StoreSupervisor(store, check_seconds=0.05) as supervisor:
        os.kill(old, signal.SIGKILL)
        _until(_restarted(supervisor, 1))
        assert store.pid not in (None, old)
        assert _state(old) is None  # reaped: no zombie left behind
        with client_of(store) as client:
            assert client.lrange("gw:acked", 0, -1) == [f"turn-{n}" for n in range(100)]
        ended = _events(caplog, "embedded_store_ended")
        assert len(ended) == 1 and ended[0]["how"] == "killed by SIGKILL"
        assert ended[0]["restart_in_s"] == 0.0  # the first restart is immediate
        assert _events(caplog, "embedded_store_restarted")[0]["pid"] == store.pid


def test_a_store_that_dies_again_soon_after_its_restart_waits_longer_each_time(
        data_dir, servers, caplog):
    caplog.set_level(logging.INFO, logger="gateway.store.embedded")
    store = EmbeddedRedis(data_dir)
    servers.append(store)
    store.start()
    with StoreSupervisor(store, check_seconds=0.05, backoff_initial_seconds=0.1,
                         stable_seconds=600) as supervisor:
        for n in range(1, 4):
            old = store.pid
            assert old is not None
            os.kill(old, signal.SIGKILL)
            _until(_restarted(supervisor, n))
    pauses = [e["restart_in_s"] for e in _events(caplog, "embedded_store_ended")]
    assert pauses == [0.0, 0.1, 0.2]


def test_a_stopped_supervisor_leaves_a_stopped_store_stopped(data_dir, caplog):
    caplog.set_level(logging.INFO, logger="gateway.store.embedded")
    store = EmbeddedRedis(data_dir)
    store.start()
    supervisor = StoreSupervisor(store, check_seconds=0.05)
    supervisor.start()
    supervisor.stop()
    store.stop()
    time.sleep(0.3)  # several check periods: a live supervisor would have restarted it
    assert store.probe() == "absent"
    assert _events(caplog, "embedded_store_ended") == []


def test_a_shared_store_that_goes_away_is_started_again_by_its_sharer(data_dir, servers):
    owner = EmbeddedRedis(data_dir)
    owner.start()
    sharer = EmbeddedRedis(data_dir)
    servers.append(sharer)
    assert sharer.start() is False and not sharer.owns
    first = _server_pid(data_dir)
    with StoreSupervisor(sharer, check_seconds=0.05) as supervisor:
        owner.stop()  # its owner stops it (SIGTERM): the socket goes away
        _until(_restarted(supervisor, 1))
        assert sharer.owns
        assert _server_pid(data_dir) not in (None, first)


def test_an_adopted_store_that_dies_is_started_again_by_its_adopter(data_dir, servers):
    first = EmbeddedRedis(data_dir)
    first.start()
    dead = _finished_pid()
    (data_dir / "redis.owner").write_text(f"{dead} 1\n")  # its owner is gone: an orphan
    adopter = EmbeddedRedis(data_dir)
    servers.append(adopter)
    assert adopter.start() is False and adopter.owns and adopter.pid is None
    orphan = _server_pid(data_dir)
    assert orphan is not None
    with StoreSupervisor(adopter, check_seconds=0.05) as supervisor:
        os.kill(orphan, signal.SIGKILL)
        first.ended()  # the orphan's parent reaps it (here: the test, which started it)
        _until(_restarted(supervisor, 1))
        assert adopter.pid is not None and adopter.pid != orphan


def _finished_pid() -> int:
    """The pid of a process that has ended and been reaped."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid
