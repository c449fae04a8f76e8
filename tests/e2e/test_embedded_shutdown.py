"""Every way a `gateway serve` process ends stops the embedded store it started, and a store
orphaned by a process killed with -9 is adopted by the next start and stopped at its exit.

Real `gateway serve` processes, real signals, the real bundled Valkey.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest

from tests.support.processes import (GatewayProcess, Processes, alive, gateway_config_file,
                                     report)


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


@pytest.mark.parametrize("signals, pause", [
    pytest.param([signal.SIGTERM], 0.2, id="sigterm"),
    pytest.param([signal.SIGINT], 0.2, id="sigint"),
    pytest.param([signal.SIGTERM, signal.SIGTERM], 0.2, id="sigterm-twice"),
    pytest.param([signal.SIGTERM, signal.SIGINT], 0.2, id="sigterm-then-sigint"),
    # SIGINT while uvicorn still shuts down: its forced exit, which skips the lifespan's
    # shutdown (the loop's teardown cancels the lifespan instead: gateway.ops.logs.ForcedExitFilter)
    pytest.param([signal.SIGTERM, signal.SIGINT], 0.01, id="sigint-forcing-the-exit"),
])
def test_a_signal_stops_the_embedded_store_with_the_gateway(workdir, signals, pause):
    config = gateway_config_file(workdir / "config.yaml", "embedded")
    data = workdir / "data"
    with Processes(workdir) as procs:
        gateway = procs.gateway(config)
        store = _store_pid(data)
        try:
            assert gateway.proc is not None
            for sig in signals:
                gateway.proc.send_signal(sig)
                time.sleep(pause)
            code = _wait_exit(gateway)
            gone = not alive(store)
            report(f"embedded store after {'+'.join(signal.Signals(s).name for s in signals)}",
                   exit_code=code, store_stopped=gone)
            assert gone, gateway.log_tail()
            if signals == [signal.SIGTERM]:  # one SIGTERM, drained: the stop asked for
                assert code == 0, gateway.log_tail()
            else:  # a second signal forced the exit: it ends by a signal it got
                assert -code in signals
            assert not (data / "redis.sock").exists()
            assert not (data / "redis.owner").exists()
            assert "Traceback" not in gateway.log_text()
            assert '"event": "shutdown_complete"' in gateway.log_text()
        finally:
            _stop_leftover(store)


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
