"""The worker process: recorded turns are applied and memory derived outside the serving
processes (`recorder.mode: process`, the default), by a `gateway worker` child that
`gateway serve` starts, restarts when it dies and stops after itself; or by workers run on
their own (`recorder.mode: external`).

Real `gateway serve` and `gateway worker` processes, a real redis-server, real signals.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest
import redis

from gateway.store.keys import KeySpace
from gateway.worker import nice_autogroup
from tests.support.processes import (STORES, Child, Ledger, Processes, alive, consumers,
                                     gateway_config_file, report, send_turn, shared_store,
                                     transcripts, wait_all_applied)



def _consumer_pids(url: str, shards: int = 0) -> set[int]:
    """Pids of the processes whose recorder consumers are in the record groups
    (consumer names are `<host>-<pid>-<n>`)."""
    return {int(name.rsplit("-", 2)[-2]) for name in consumers(url, shards=shards)}


def _wait(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def _send(url: str, ledger: Ledger, names: list[str], turns: range) -> None:
    async def run() -> None:
        async with httpx.AsyncClient(timeout=20) as client:
            async def one(name: str) -> None:
                for n in turns:
                    ok, error = await send_turn(client, url, name, n, stream=n % 3 == 2)
                    ledger.sent(name, n, ok, error)
            await asyncio.gather(*(one(name) for name in names))
    asyncio.run(run())


@pytest.mark.parametrize("store", STORES)
def test_serve_applies_turns_in_a_worker_child_and_stops_it_after_itself(tmp_path, store,
                                                                           request):
    with Processes(tmp_path) as procs:
        url, shards = shared_store(procs, store, request)
        gateway = procs.gateway(gateway_config_file(tmp_path / "config.yaml", url,
                                                    shards=shards))
        # On a cluster, a user each: the worker's recorders serve several shards' streams.
        ledger = Ledger()
        names = [f"w-{n}@u{n}" if shards else f"w-{n}" for n in range(3)]
        _send(gateway.url, ledger, names, range(6))
        wait_all_applied(url, names, shards=shards)
        counts = ledger.check(transcripts(url, names, shards=shards))
        workers = _consumer_pids(url, shards)
        assert counts["stored"] == counts["completed"] == 18, counts
        assert counts["lost"] == counts["duplicated"] == counts["out_of_order"] == 0, counts
        # The turns were applied by another process than the one serving requests: its child.
        assert len(workers) == 1 and gateway.pid not in workers, workers
        (worker,) = workers
        assert alive(worker)
        assert Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[-1].split()[1] \
            == str(gateway.pid)
        # Background work at a lower priority, every thread of it (Linux nices per thread).
        nices = _thread_nices(worker)
        assert nices and min(nices) >= 10, nices
        # And its autogroup (Linux schedules a session as one group: thread nices weigh only
        # inside it), which holds the worker alone — the server's keeps its priority.
        if Path(f"/proc/{worker}/autogroup").exists():
            assert Path(f"/proc/{worker}/autogroup").read_text().split()[-1] == "10"
            assert Path(f"/proc/{worker}/autogroup").read_text().split()[0] != \
                Path(f"/proc/{gateway.pid}/autogroup").read_text().split()[0]
            assert Path(f"/proc/{gateway.pid}/autogroup").read_text().split()[-1] == "0"
        code = gateway.terminate(30)
        report(f"worker child ({store})", turns_applied=counts["stored"],
               worker_pid_differs=True,
               exit_code=code, worker_stopped=not alive(worker))
        assert code == 0  # one SIGTERM, drained (worker included): the stop asked for
        assert not alive(worker)
        assert '"event": "worker_stopped"' in gateway.log_text()
        assert consumers(url, shards=shards) == []  # the worker left every group tidy
        assert "Traceback" not in gateway.log_text()


def test_a_worker_killed_with_9_is_restarted_and_no_turn_is_lost(tmp_path):
    with Processes(tmp_path) as procs:
        store = procs.redis()
        gateway = procs.gateway(gateway_config_file(tmp_path / "config.yaml", store.url))
        ledger, names = Ledger(), ["k-0", "k-1"]
        _send(gateway.url, ledger, names, range(4))
        (first,) = _wait(lambda: _consumer_pids(store.url), 20, "the worker's consumer")
        os.kill(first, signal.SIGKILL)
        # Turns recorded while no worker runs wait in the stream: requests are unaffected.
        _send(gateway.url, ledger, names, range(4, 10))
        second = _wait(lambda: _consumer_pids(store.url) - {first}, 30, "a new worker")
        wait_all_applied(store.url, names, timeout=30)
        counts = ledger.check(transcripts(store.url, names))
        report("worker kill -9", killed=first, restarted_as=sorted(second), **counts)
        assert counts["failed_requests"] == 0, ledger.errors[:3]
        assert counts["stored"] == counts["completed"] == 20, counts
        assert counts["lost"] == counts["duplicated"] == counts["out_of_order"] == 0, counts
        assert '"event": "worker_exited"' in gateway.log_text()
        assert gateway.running


def test_serve_killed_with_9_takes_its_worker_with_it(tmp_path):
    with Processes(tmp_path) as procs:
        store = procs.redis()
        gateway = procs.gateway(gateway_config_file(tmp_path / "config.yaml", store.url))
        (worker,) = _wait(lambda: _consumer_pids(store.url), 20, "the worker's consumer")
        gateway.kill()
        _wait(lambda: not alive(worker), 20, "the orphaned worker to exit")


def test_external_mode_leaves_turns_to_a_gateway_worker_run_on_its_own(tmp_path):
    with Processes(tmp_path) as procs:
        store = procs.redis()
        config = gateway_config_file(tmp_path / "config.yaml", store.url,
                                     recorder={"mode": "external"})
        gateway = procs.gateway(config)
        ledger, names = Ledger(), ["e-0"]
        _send(gateway.url, ledger, names, range(3))
        time.sleep(1.0)
        with redis.Redis.from_url(store.url, decode_responses=True) as client:
            enqueued = client.xlen(KeySpace().records)
        assert consumers(store.url) == []  # nobody applies them: no worker beside the server
        worker = Child("worker", [sys.executable, "-m", "gateway", "worker", "--config",
                                  str(config)], tmp_path / "worker.log")
        worker.spawn()
        try:
            wait_all_applied(store.url, names, timeout=30)
            counts = ledger.check(transcripts(store.url, names))
            worker.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
            code = worker.proc.wait(30)  # type: ignore[union-attr]
        finally:
            worker.terminate(5)
        report("external worker", enqueued_before_worker=enqueued, exit_code=code, **counts)
        assert enqueued == 3
        assert counts["stored"] == 3 and counts["lost"] == 0, counts
        assert code == 0, worker.log_tail()
        assert '"event": "worker_stopped"' in worker.log_text()


def _thread_nices(pid: int) -> list[int]:
    """The niceness of each thread of `pid` (a thread that ends while they are read — an idle
    thread pool's worker — is left out: the read fails with ENOENT at open or ESRCH after)."""
    nices = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = Path(task, "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        nices.append(int(stat.rsplit(")", 1)[-1].split()[16]))
    return nices


def test_an_autogroup_is_niced_by_the_increment_up_to_19(tmp_path):
    group = tmp_path / "autogroup"
    group.write_text("/autogroup-41 nice 3\n")
    assert nice_autogroup(10, group) == 13 and group.read_text() == "13"
    group.write_text("/autogroup-41 nice 15\n")
    assert nice_autogroup(10, group) == 19 and group.read_text() == "19"
    # No autogroups (another OS, or a kernel without them): nothing to nice, no error.
    assert nice_autogroup(10, tmp_path / "absent") is None
