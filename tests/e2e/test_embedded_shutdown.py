"""Every way a `gateway serve` process ends stops the embedded store it started, and a store
orphaned by a process killed with -9 is adopted by the next start and stopped at its exit.

Real `gateway serve` processes, real signals, the real bundled Valkey.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from tests.support.processes import (AUTH, GatewayProcess, Processes, alive, chat_body,
                                     gateway_config_file, report)


@pytest.fixture
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sd")  # short: the store's socket path must fit 107 bytes


def _store_pid(data: Path) -> int:
    return int((data / "redis.pid").read_text())



def _wait_exit(gateway: GatewayProcess, timeout: float = 40.0) -> int:
    assert gateway.proc is not None
    return gateway.proc.wait(timeout)


def _stop_leftover(pid: int) -> None:
    """Test hygiene: never leave a store behind, even when an assertion failed."""
    if alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@contextmanager
def _serving(workdir: Path, **config: Any) -> Iterator[tuple[GatewayProcess, int]]:
    """A `gateway serve` on an embedded store, and the store's pid; the store is never left
    running, whatever the test asserted."""
    with Processes(workdir) as procs:
        gateway = procs.gateway(gateway_config_file(workdir / "config.yaml", "embedded",
                                                    **config))
        store = _store_pid(workdir / "data")
        try:
            assert gateway.proc is not None
            yield gateway, store
        finally:
            _stop_leftover(store)


def _check_stopped(gateway: GatewayProcess, data: Path, store: int, name: str) -> int:
    """Waits for the exit; asserts the store, its socket and owner file are gone and the
    shutdown logged; returns the exit code."""
    code = _wait_exit(gateway)
    gone = not alive(store)
    report(f"embedded store after {name}", exit_code=code, store_stopped=gone)
    assert gone, gateway.log_tail()
    assert not (data / "redis.sock").exists()
    assert not (data / "redis.owner").exists()
    assert "Traceback" not in gateway.log_text(), gateway.log_text()
    assert '"event": "shutdown_complete"' in gateway.log_text()
    return code


@pytest.mark.parametrize("sig, code", [
    pytest.param(signal.SIGTERM, 0, id="sigterm"),  # drained: the stop a supervisor asked for
    pytest.param(signal.SIGINT, -signal.SIGINT, id="sigint"),  # Ctrl-C ends by SIGINT
])
def test_a_signal_stops_the_embedded_store_with_the_gateway(workdir, sig, code):
    with _serving(workdir) as (gateway, store):
        gateway.proc.send_signal(sig)
        assert _check_stopped(gateway, workdir / "data", store, sig.name) == code, \
            gateway.log_tail()


def _first_bytes_of_a_stream(gateway: GatewayProcess, done: threading.Event,
                             body: list[bytes]) -> threading.Thread:
    """Streams a slow reply on a thread (its bytes into `body`, `done` at its end); returns
    once its first bytes arrived, so the server is mid-request."""
    started = threading.Event()

    def run() -> None:
        try:
            with httpx.stream("POST", gateway.url + "/v1/chat/completions", timeout=30,
                              json=chat_body("held", 0, model="stream-slow", stream=True),
                              headers={**AUTH, "X-Conversation-Id": "held"}) as r:
                for chunk in r.iter_bytes():
                    body.append(chunk)
                    started.set()
        except httpx.HTTPError:
            pass  # cut by a forced exit: what `body` holds says so
        finally:
            started.set()
            done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(20)
    return thread


@pytest.mark.parametrize("second, code, finished", [
    # uvicorn lets the drain finish (it is bounded by shutdown_timeout_seconds): exit 0
    pytest.param(signal.SIGTERM, 0, True, id="sigterm-twice"),
    # a second Ctrl-C is uvicorn's forced exit: the stream is cut, the shutdown still runs
    # (the loop's teardown cancels the lifespan: gateway.ops.logs.ForcedExitFilter)
    pytest.param(signal.SIGINT, -signal.SIGINT, False, id="sigint-forcing-the-exit"),
])
def test_a_second_signal_while_a_request_drains(workdir, second, code, finished):
    """The second signal lands while a stream is in flight (a 3 s reply): uvicorn is still in
    its graceful shutdown, whatever the machine's speed."""
    with _serving(workdir, models={"stream-slow": {"model": "fake/slow-3000"}}) \
            as (gateway, store):
        done, body = threading.Event(), []
        thread = _first_bytes_of_a_stream(gateway, done, body)
        gateway.proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        assert not done.is_set()  # the second signal comes while the stream runs
        gateway.proc.send_signal(second)
        name = f"SIGTERM+{second.name} mid-stream"
        assert _check_stopped(gateway, workdir / "data", store, name) == code, \
            gateway.log_tail()
        thread.join(10)
        assert b"".join(body).rstrip().endswith(b"data: [DONE]") == finished


def test_a_failed_start_up_stops_the_embedded_store(workdir):
    config = gateway_config_file(workdir / "config.yaml", "embedded")
    data = workdir / "data"
    with Processes(workdir) as procs, socket.socket() as taken:
        gateway = procs.gateway(config, start=False)
        taken.bind(("127.0.0.1", gateway.port))  # uvicorn cannot bind: start-up fails
        taken.listen()
        gateway.spawn()
        code = _wait_exit(gateway)
        assert code != 0
        pid_file = data / "redis.pid"
        assert not pid_file.exists() or not alive(_store_pid(data)), gateway.log_tail()
        assert "embedded_store" in gateway.log_text()  # the store had been started


def test_a_store_orphaned_by_kill_9_is_adopted_and_stopped_by_the_next_gateway(workdir):
    config = gateway_config_file(workdir / "config.yaml", "embedded")
    data = workdir / "data"
    with Processes(workdir) as procs:
        crashed = procs.gateway(config)
        store = _store_pid(data)
        try:
            crashed.kill()  # -9: no cleanup at all; the store is in its own session
            assert alive(store)
            successor = procs.gateway(config)
            assert _store_pid(data) == store  # adopted, not replaced: no AOF reload
            assert "adopting it" in successor.log_text()
            assert successor.proc is not None
            successor.proc.send_signal(signal.SIGTERM)
            code = _wait_exit(successor)
            report("orphaned embedded store", adopted=True, exit_code=code,
                   store_stopped=not alive(store))
            assert not alive(store), successor.log_tail()
        finally:
            _stop_leftover(store)


def test_sigterm_with_several_workers_stops_the_embedded_store(workdir):
    # uvicorn's multi-process supervisor handles the signal itself and returns normally.
    config = gateway_config_file(workdir / "config.yaml", "embedded")
    data = workdir / "data"
    with Processes(workdir) as procs:
        gateway = procs.gateway(config, workers=2)
        store = _store_pid(data)
        try:
            assert gateway.proc is not None
            gateway.proc.send_signal(signal.SIGTERM)
            code = _wait_exit(gateway)
            assert not alive(store), gateway.log_tail()
            assert code == 0, (code, gateway.log_tail())
        finally:
            _stop_leftover(store)
