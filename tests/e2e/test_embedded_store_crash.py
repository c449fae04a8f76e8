"""kill -9 of the bundled store under a running `gateway serve`: the gateway reaps it, starts it
again on the same data dir, keeps answering meanwhile (without memory), and loses no turn.

A real `gateway serve` (one and two serving processes, and its worker process), the real
bundled Valkey, real signals. Two kills:
- the first measures how soon the store is back (PING, /readyz, a request reading memory);
- for the second, the test holds the store's start lock (`<data_dir>/redis.lock`, the lock
  every start takes) while it sends turns, so they surely meet a store that is down — as a
  slow restart (a long AOF replay) would — then lets the restart go on.
Every turn sent must end up in its transcript, once, in order. Polls are bounded; the
recovery time is printed, not asserted.
"""

from __future__ import annotations

import fcntl
import os
import signal
import time
from pathlib import Path
from typing import Any, Callable

import httpx
import pytest

from tests.support.processes import (AUTH, GatewayProcess, Ledger, Processes, alive,
                                     chat_body, gateway_config_file, report, transcripts,
                                     turn_text, user_of, wait_all_applied)

CONVERSATIONS = ["crash-a@ua", "crash-b@ub", "crash-c@uc"]
TURNS_EACH_PHASE = 3


@pytest.fixture
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ec")  # short: the store's socket path must fit 107 bytes


def _store_pid(data: Path) -> int | None:
    try:
        return int((data / "redis.pid").read_text())
    except (OSError, ValueError):
        return None


def _stop_leftover(pid: int) -> None:
    """Test hygiene: never leave a store behind, even when an assertion failed."""
    if pid and alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _reaped(pid: int) -> bool:
    """Gone from the process table: neither running nor a zombie."""
    return not Path(f"/proc/{pid}").exists()


def _zombie_children(parent: int) -> list[int]:
    zombies = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if fields[0] == "Z" and int(fields[1]) == parent:
            zombies.append(int(entry.name))
    return zombies


def _until(condition: Callable[[], object], what: str, gateway: GatewayProcess,
           timeout: float = 60.0, interval: float = 0.05) -> float:
    """Poll until `condition` holds; the seconds it took. Fails with the gateway's log."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, f"{what} not reached:\n{gateway.log_tail()}"
        time.sleep(interval)
    return time.monotonic() - started


def _status(client: httpx.Client, url: str) -> int:
    try:
        return client.get(url, timeout=5).status_code
    except httpx.HTTPError:
        return 0


class Chat:
    """Stateful turns (the new user message only) through the gateway; each one noted."""

    def __init__(self, client: httpx.Client, gateway: GatewayProcess):
        self.client, self.gateway = client, gateway
        self.ledger = Ledger()
        self.next = {name: 0 for name in CONVERSATIONS}

    def turn(self, name: str) -> httpx.Response:
        n = self.next[name]
        self.next[name] += 1
        headers = {**AUTH, "X-Conversation-Id": name, "X-User-Id": user_of(name) or ""}
        response = self.client.post(self.gateway.url + "/v1/chat/completions",
                                    json=chat_body(name, n), headers=headers, timeout=20)
        ok = response.status_code == 200 and \
            response.json()["choices"][0]["message"]["content"] == turn_text(name, n)
        self.ledger.sent(name, n, ok, "" if ok else f"{response.status_code}: {response.text}")
        return response

    def round(self) -> list[httpx.Response]:
        return [self.turn(name) for name in CONVERSATIONS for _ in range(TURNS_EACH_PHASE)]


def _reads_memory(response: httpx.Response) -> bool:
    """The request read the stored conversation and memory (no fail-open passthrough)."""
    h = response.headers
    return response.status_code == 200 and "x-gateway-passthrough" not in h \
        and "x-gateway-memory-error" not in h and "x-gateway-memory-recalled" in h


def _memory_back(chat: Chat, more_than: int = 0) -> Callable[[], bool]:
    """A request reads memory again: no fail-open passthrough, and the history it counts
    (`x-gateway-tokens-original`) is more than `more_than` tokens, the count of a request
    that had only its own message (the stored transcript was read)."""
    def check() -> bool:
        response = chat.turn(CONVERSATIONS[0])
        return _reads_memory(response) and \
            int(response.headers["x-gateway-tokens-original"]) > more_than
    return check


@pytest.mark.parametrize("workers", [1, 2])
def test_kill_9_of_the_embedded_store_is_recovered_without_losing_a_turn(workdir, workers):
    config = gateway_config_file(workdir / "config.yaml", "embedded",
                                 recorder={"buffer_retry_max_seconds": 0.5})
    data = workdir / "data"
    store_url = f"unix://{(data / 'redis.sock').resolve()}"
    stores: list[int] = []  # every store pid seen: none may be left running
    try:
        with Processes(workdir) as procs, httpx.Client() as client:
            gateway = procs.gateway(config, workers=workers)
            ready = gateway.url + "/readyz"
            chat = Chat(client, gateway)
            before = chat.round()
            assert all(_reads_memory(r) for r in before), [dict(r.headers) for r in before]

            # Kill 1: how soon is the store back and memory read again?
            first = _store_pid(data)
            assert first is not None
            os.kill(first, signal.SIGKILL)
            stores.append(first)
            t0 = time.monotonic()
            _until(lambda: _store_pid(data) not in (None, first), "a new store pid", gateway)
            _until(lambda: _status(client, ready) == 200, "/readyz 200", gateway)
            ready_s = time.monotonic() - t0
            _until(_memory_back(chat), "memory read again", gateway, interval=0.1)
            memory_s = time.monotonic() - t0
            _until(lambda: _reaped(first), "the killed store reaped", gateway, timeout=10)
            chat.round()

            # Kill 2, the restart held back while turns are sent: they meet a store that is
            # down, are answered anyway, and wait in the serving processes' record buffers.
            second = _store_pid(data)
            assert second is not None and second != first
            with open(data / "redis.lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    os.kill(second, signal.SIGKILL)
                    stores.append(second)
                    _until(lambda: _status(client, ready) == 503, "/readyz 503", gateway)
                    healthz = _status(client, gateway.url + "/healthz")
                    during = chat.round()
                    readyz_during = _status(client, ready)
                    _until(lambda: _reaped(second), "the killed store reaped", gateway,
                           timeout=10)
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
            t1 = time.monotonic()
            assert [r.status_code for r in during] == [200] * len(during)
            assert all(r.headers.get("x-gateway-passthrough") == "store_unavailable"
                       for r in during), [dict(r.headers) for r in during]
            assert (healthz, readyz_during) == (200, 503)
            alone = int(during[0].headers["x-gateway-tokens-original"])
            _until(lambda: _status(client, ready) == 200, "/readyz 200 again", gateway)
            released_ready_s = time.monotonic() - t1
            _until(_memory_back(chat, more_than=alone), "memory read again", gateway,
                   interval=0.1)
            chat.round()

            counts = _stored(store_url, chat.ledger, gateway)
            wait_all_applied(store_url, CONVERSATIONS, timeout=60)
            counts = chat.ledger.check(transcripts(store_url, CONVERSATIONS))
            log = gateway.log_text()
            zombies = _zombie_children(gateway.pid)
            report(f"embedded store kill -9 ({workers} serving process(es))",
                   turns=counts["completed"] + counts["failed_requests"],
                   failed=counts["failed_requests"], lost=counts["lost"],
                   duplicated=counts["duplicated"], sent_while_down=len(during),
                   readyz_back_s=f"{ready_s:.2f}", memory_back_s=f"{memory_s:.2f}",
                   back_after_lock_released_s=f"{released_ready_s:.2f}",
                   zombies=len(zombies))
            assert counts["failed_requests"] == 0, chat.ledger.errors[:5]
            assert counts["lost"] == 0 and counts["duplicated"] == 0, counts
            assert counts["out_of_order"] == 0 and counts["unknown"] == 0, counts
            assert counts["replies_missing"] == 0, counts
            assert zombies == []
            assert log.count('"event": "embedded_store_ended"') == 2, log
            assert log.count('"event": "embedded_store_restarted"') == 2, log
    finally:
        for pid in [*stores, _store_pid(data) or 0]:
            _stop_leftover(pid)


def _stored(store_url: str, ledger: Ledger, gateway: GatewayProcess) -> dict[str, Any]:
    """Poll until every completed turn is stored (the buffers flushed); the last counts."""
    counts: dict[str, Any] = {}

    def all_stored() -> bool:
        counts.update(ledger.check(transcripts(store_url, ledger.names)))
        return counts["stored"] + counts["duplicated"] >= counts["completed"]
    _until(all_stored, "every turn stored", gateway, timeout=60)
    return counts
