"""A benchmark harness stopped by SIGTERM stops its children as on Ctrl-C: nothing it started
(child servers, embedded stores, gateway processes) is left running.

Each test starts the harness in a subprocess of its own session, waits until it says its
children serve, notes every process below it, sends SIGTERM to the harness alone, and checks
that the harness and all of those processes are gone (bounded waits, no timing asserts).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from bench.overhead.processes import descendants
from tests.support.processes import REPO, alive

FIXTURES = Path(__file__).parents[1] / "fixtures"

HARNESS = textwrap.dedent("""
    import shutil, sys, tempfile, time
    from pathlib import Path

    from bench.locomo.server import gateway_processes
    from bench.overhead.processes import (ChildServer, ChildServers, free_port,
                                          stop_children_on_sigterm)
    from gateway.config import hash_key
    from gateway.store import EmbeddedRedis

    stop_children_on_sigterm()
    work = Path(sys.argv[1])
    port = free_port()
    store_dir = Path(tempfile.mkdtemp(prefix="cg-sigterm-"))  # short: a socket path's limit
    store = EmbeddedRedis(store_dir)
    store.start()
    try:
        config = {"store": store.url, "server": {"data_dir": str(work / "data")},
                  "tenants": {"acme": {"api_keys": [{"sha256": hash_key("k")}],
                                       "models": {"echo": {"model": "fake/echo"}}}}}
        with ChildServers() as servers, \\
                gateway_processes(config, 1, str(work / "fail-open.log")) as urls:
            servers.start(ChildServer(
                "http", [sys.executable, "-m", "http.server", str(port), "--bind",
                         "127.0.0.1"], f"http://127.0.0.1:{port}/", work / "http.log",
                cwd=work))
            print("serving", flush=True)
            while True:
                time.sleep(1)
    finally:
        store.stop()
        shutil.rmtree(store_dir, ignore_errors=True)
""")


def _start(argv: list[str], work: Path) -> subprocess.Popen[bytes]:
    with (work / "harness.log").open("wb") as log:
        return subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _log(work: Path) -> str:
    return (work / "harness.log").read_text(errors="replace")


def _wait_for(proc: subprocess.Popen[bytes], needle: str, work: Path,
              timeout: float = 240) -> None:
    """Until the harness has printed `needle` (a bound, not a timing assert)."""
    deadline = time.monotonic() + timeout
    while needle not in _log(work):
        assert proc.poll() is None, _log(work)[-3000:]
        assert time.monotonic() < deadline, _log(work)[-3000:]
        time.sleep(0.2)


def _terminate_and_check_children_gone(proc: subprocess.Popen[bytes], work: Path) -> None:
    children = descendants(proc.pid)
    assert children, "the harness started no process"
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)  # bounded: its clean-up stops each child within a deadline
        deadline = time.monotonic() + 30
        while [pid for pid in children if alive(pid)] and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [pid for pid in children if alive(pid)]
        assert not left, (left, _log(work)[-3000:])
    finally:
        for pid in [proc.pid, *children]:  # whatever a failure left: never leak
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_sigterm_stops_child_servers_embedded_stores_and_gateway_processes(tmp_path):
    proc = _start([sys.executable, "-c", HARNESS, str(tmp_path)], tmp_path)
    _wait_for(proc, "serving", tmp_path)
    _terminate_and_check_children_gone(proc, tmp_path)


def test_sigterm_stops_bench_locomo_with_its_gateway_and_store(tmp_path):
    """The issue's case: `python -m bench locomo` (its own embedded store, a gateway child
    process) stopped by SIGTERM once its gateway serves."""
    proc = _start([sys.executable, "-m", "bench", "locomo", "--data",
                   str(FIXTURES / "conversations_tiny_en.json"), "--budgets", "100000",
                   "--modes", "stateless", "--out", str(tmp_path / "r.json")], tmp_path)
    _wait_for(proc, "gateway serving at", tmp_path)
    _terminate_and_check_children_gone(proc, tmp_path)
