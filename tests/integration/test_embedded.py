"""The embedded Valkey server: start, reuse, persistence, and recovery from a crashed run."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from gateway.store.embedded import EmbeddedRedis, EmbeddedRedisError
from tests.support.embedded import client_of


def _wait_gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return True
        if stat.rsplit(")", 1)[-1].split()[0] == "Z":
            return True
        time.sleep(0.02)
    return False


def test_start_serves_on_the_socket_only_with_append_only_persistence(data_dir, servers):
    server = EmbeddedRedis(data_dir)
    servers.append(server)
    assert server.start() is True
    assert server.url == f"unix://{data_dir.resolve()}/redis.sock"
    with client_of(server) as client:
        assert client.ping()
        assert client.config_get("port") == {"port": "0"}
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("dir")["dir"] == str(data_dir.resolve())
    assert int((data_dir / "redis.pid").read_text()) == server.pid
    assert (data_dir / "redis.log").exists()


def test_stop_ends_the_server_and_removes_its_socket(data_dir):
    server = EmbeddedRedis(data_dir)
    server.start()
    pid = server.pid
    server.stop()
    assert pid is not None and _wait_gone(pid)
    assert not (data_dir / "redis.sock").exists()
    assert not (data_dir / "redis.pid").exists()
    assert server.probe() == "absent"


def test_data_survives_a_restart_on_the_same_dir(data_dir):
    first = EmbeddedRedis(data_dir)
    first.start()
    with client_of(first) as client:
        client.rpush("gw:test", "one", "two")
    first.stop()

    second = EmbeddedRedis(data_dir)
    assert second.start() is True
    try:
        with client_of(second) as client:
            assert client.lrange("gw:test", 0, -1) == ["one", "two"]
    finally:
        second.stop()


def test_second_start_on_the_same_dir_reuses_the_running_server(data_dir, servers):
    owner = EmbeddedRedis(data_dir)
    servers.append(owner)
    owner.start()
    other = EmbeddedRedis(data_dir)
    assert other.start() is False
    assert other.pid is None
    other.stop()  # not its server: must not stop it
    assert owner.probe() == "ready"


def test_concurrent_starts_start_exactly_one_server(data_dir, servers):
    contenders = [EmbeddedRedis(data_dir) for _ in range(6)]
    servers.extend(contenders)
    results: list[bool] = []
    threads = [threading.Thread(target=lambda s=s: results.append(s.start()))
               for s in contenders]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert sorted(results) == [False] * 5 + [True]


def test_a_server_killed_hard_leaves_files_and_the_next_start_replaces_it(data_dir, servers):
    crashed = EmbeddedRedis(data_dir)
    crashed.start()
    pid = crashed.pid
    os.kill(pid, signal.SIGKILL)
    crashed._proc.wait()  # reap it, as the dead parent's init would
    assert (data_dir / "redis.pid").exists() and (data_dir / "redis.sock").exists()

    fresh = EmbeddedRedis(data_dir)
    servers.append(fresh)
    assert fresh.start() is True
    assert fresh.pid != pid
    assert int((data_dir / "redis.pid").read_text()) == fresh.pid
    with client_of(fresh) as client:
        assert client.ping()


def test_a_hung_server_of_ours_is_ended_and_replaced(data_dir, servers):
    hung = EmbeddedRedis(data_dir)
    servers.append(hung)
    hung.start()
    pid = hung.pid
    os.kill(pid, signal.SIGSTOP)  # alive, holds the socket, answers nothing
    try:
        assert hung.probe(timeout=0.2) == "silent"
        fresh = EmbeddedRedis(data_dir)
        servers.append(fresh)
        assert fresh.start() is True
        assert _wait_gone(pid)
        assert fresh.pid != pid
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def test_a_stale_pidfile_naming_a_foreign_process_never_gets_it_killed(data_dir, servers):
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        (data_dir / "redis.pid").write_text(f"{bystander.pid}\n")
        # A socket file nobody listens on, as a crashed server leaves it.
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(data_dir / "redis.sock"))
        server = EmbeddedRedis(data_dir)
        servers.append(server)
        assert server.probe() == "absent"
        assert server.start() is True
        assert bystander.poll() is None
        assert int((data_dir / "redis.pid").read_text()) == server.pid
    finally:
        bystander.kill()
        bystander.wait()


def test_a_server_that_cannot_start_raises_naming_the_dir_and_the_log(data_dir):
    server = EmbeddedRedis(data_dir, options={"no-such-setting": "1"})
    with pytest.raises(EmbeddedRedisError) as failure:
        server.start(timeout=5)
    message = str(failure.value)
    assert str(data_dir.resolve()) in message
    assert "no-such-setting" in message  # from the server's own complaint in the log tail
    assert server.pid is None


def test_a_data_dir_too_deep_for_a_unix_socket_is_refused_clearly(tmp_path):
    deep = tmp_path / ("d" * 120)
    with pytest.raises(EmbeddedRedisError, match="too deep"):
        EmbeddedRedis(deep).start()
