"""kill -9 of a replica under load loses no turn: its pending record jobs are reclaimed.

Two real gateway processes share one real redis-server. Clients (stateful conversations,
uniquely numbered messages, some streaming, some slow) spread their requests over both; one
replica is killed with SIGKILL while it holds unacknowledged record jobs (it is paused for an
instant until the group shows it holding some, then killed) and while requests are in flight.
A request refused because the replica is gone is resent to the survivor, as a load balancer
does. Afterwards every turn whose response completed must be stored exactly once, in order;
a turn whose request died with the replica is counted apart (the client got an error).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import httpx
import pytest

from tests.support.processes import (STORES, Ledger, Processes, gateway_config_file,
                                     pending_for, report, send_turn, shared_store, transcripts,
                                     wait_all_applied)

CLIENTS = 6
TURNS = 14
KILL_AFTER = 25  # completed turns before the kill
MODELS = [("echo", False), ("slow", False), ("stream-slow", True), ("echo", True)]


async def _run_clients(urls: list[str], ledger: Ledger, dead: set[str], users: bool) -> None:
    async with httpx.AsyncClient(timeout=20) as client:
        async def one(c: int) -> None:
            # `users`: a user each, so conversations spread over a cluster's shards.
            name = f"crash-{c}@u{c}" if users else f"crash-{c}"
            for n in range(TURNS):
                model, stream = MODELS[(c + n) % len(MODELS)]
                for attempt in range(len(urls) + 1):
                    alive = [u for u in urls if u not in dead]
                    url = alive[(c + n + attempt) % len(alive)]
                    try:
                        ok, error = await send_turn(client, url, name, n, model=model,
                                                    stream=stream)
                    except httpx.ConnectError:
                        dead.add(url)  # refused: never reached a gateway; resend elsewhere
                        continue
                    except httpx.HTTPError as exc:
                        ok, error = False, f"{type(exc).__name__}: {exc}"
                    ledger.sent(name, n, ok, error)
                    break
        await asyncio.gather(*(one(c) for c in range(CLIENTS)))


def _kill_while_holding_jobs(redis_url: str, victim, ledger: Ledger,
                             deadline: float, shards: int) -> int:
    """Wait for KILL_AFTER completed turns, then pause the victim until the group shows it
    holding unacknowledged jobs (bounded tries) and SIGKILL it. Returns the jobs it held."""
    while sum(map(len, ledger.completed.values())) < KILL_AFTER:
        assert time.monotonic() < deadline, "load did not progress"
        time.sleep(0.02)
    prefix = f"{os.uname().nodename}-"
    held = 0
    while True:  # until caught holding jobs (the load keeps it busy), bounded by `deadline`
        victim.signal(signal.SIGSTOP)
        held = pending_for(redis_url, f"{prefix}{victim.pid}-", shards=shards)
        if held or time.monotonic() >= deadline:
            break
        victim.signal(signal.SIGCONT)
        time.sleep(0.005)
    victim.kill()
    return held


@pytest.mark.parametrize("store", STORES)
def test_kill_9_of_a_replica_under_load_loses_no_completed_turn(tmp_path, store, request):
    with Processes(tmp_path) as procs:
        url, shards = shared_store(procs, store, request)
        # Recorders on the serving loops (`background`), so the killed process holds record
        # jobs; a killed worker process is tests/e2e/test_worker_process.py.
        config = gateway_config_file(tmp_path / "config.yaml", url, shards=shards,
                                     recorder={"mode": "background"})
        a, b = procs.gateway(config), procs.gateway(config)
        ledger, dead = Ledger(), set()
        started = time.monotonic()

        async def scenario() -> int:
            clients = asyncio.create_task(_run_clients([a.url, b.url], ledger, dead,
                                                       users=bool(shards)))
            held = await asyncio.to_thread(_kill_while_holding_jobs, url, a, ledger,
                                           time.monotonic() + 30, shards)
            dead.add(a.url)
            await asyncio.wait_for(clients, 60)
            return held

        held = asyncio.run(scenario())
        recovery_s = wait_all_applied(url, ledger.names, timeout=30, shards=shards)
        counts = ledger.check(transcripts(url, ledger.names, shards=shards))
        reclaimed = b.log_text().count("reclaimed job")
        report(f"crash (kill -9 of 1 of 2 replicas, {store})", turns_sent=CLIENTS * TURNS,
               jobs_held_by_killed_replica=held, reclaimed_by_survivor=reclaimed,
               recovery_s=f"{recovery_s:.1f}", elapsed_s=f"{time.monotonic() - started:.1f}",
               **counts)
        assert counts["completed"] + counts["failed_requests"] == CLIENTS * TURNS
        assert counts["lost"] == 0 and counts["duplicated"] == 0, counts
        assert counts["stored"] == counts["completed"]
        assert counts["out_of_order"] == 0 and counts["unknown"] == 0, counts
        assert counts["replies_missing"] == 0, counts
        assert held >= 1  # it was killed holding jobs (else the test proves no reclaim)...
        assert reclaimed >= 1, b.log_tail()  # ...and the survivor took them over
        assert b.running
