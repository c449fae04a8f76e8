"""SIGTERM: stop accepting, finish in-flight streams, drain the recorder, leave the group, exit;
with the store gone, the buffered turns go to the journal and the next start stores them.

Real gateway processes on a real redis-server.
"""

from __future__ import annotations

import asyncio
import signal
import stat
import time
from pathlib import Path

import httpx
import pytest

from tests.support.processes import (AUTH, Ledger, Processes, chat_body, consumers,
                                     gateway_config_file, report, send_turn, transcripts,
                                     turn_text, wait_all_applied)

STREAMS = 4


def test_sigterm_finishes_in_flight_streams_records_them_and_exits(tmp_path):
    with Processes(tmp_path) as procs:
        redis = procs.redis()
        config = gateway_config_file(tmp_path / "config.yaml", redis.url,
                                     models={"stream-slow": {"model": "fake/slow-4000"}},
                                     server={"shutdown_timeout_seconds": 10})
        gateway = procs.gateway(config)
        names = [f"term-{i}" for i in range(STREAMS)]

        async def scenario() -> tuple[list[bytes], str, float]:
            async with httpx.AsyncClient(timeout=20) as client:
                first_bytes = [asyncio.Event() for _ in names]

                async def stream(i: int) -> bytes:
                    body = chat_body(names[i], 0, model="stream-slow", stream=True)
                    async with client.stream("POST", gateway.url + "/v1/chat/completions",
                                             json=body, headers={
                                                 **AUTH, "X-Conversation-Id": names[i]}) as r:
                        chunks = []
                        async for chunk in r.aiter_bytes():
                            chunks.append(chunk)
                            first_bytes[i].set()
                        return b"".join(chunks)

                streams = [asyncio.create_task(stream(i)) for i in range(STREAMS)]
                await asyncio.wait_for(asyncio.gather(*(e.wait() for e in first_bytes)), 10)
                gateway.proc.send_signal(signal.SIGTERM)
                signalled = time.monotonic()
                # New connections are refused while the streams still run (a poll bounded by
                # the streams' end, not by the clock: once they are done, the claim is moot).
                refused = "accepted"
                while not all(s.done() for s in streams):
                    # A fresh connection each probe: a kept-alive one the server is closing
                    # fails with a read error, which says nothing about new connections.
                    try:
                        async with httpx.AsyncClient(timeout=0.5) as probe:
                            await probe.get(gateway.url + "/healthz")
                    except httpx.ConnectError:
                        refused = "refused" if not all(s.done() for s in streams) \
                            else "refused only after the streams ended"
                        break
                    except (httpx.ReadError, httpx.RemoteProtocolError):
                        pass  # accepted, then closed by the shutting-down server: poll again
                    await asyncio.sleep(0.05)
                bodies = await asyncio.wait_for(asyncio.gather(*streams), 15)
                return bodies, refused, signalled

        bodies, refused, signalled = asyncio.run(scenario())
        code = gateway.proc.wait(20)
        exit_s = time.monotonic() - signalled
        log = gateway.log_text()
        wait_all_applied(redis.url, names, timeout=10)
        stored = transcripts(redis.url, names)
        complete = sum(1 for name in names if len(stored[name]) == 2
                       and stored[name][1].message.text == turn_text(name, 0)
                       and not stored[name][1].incomplete)
        report("graceful shutdown (SIGTERM with 4 streams in flight)",
               streams_finished=sum(b.rstrip().endswith(b"data: [DONE]") for b in bodies),
               turns_stored_complete=complete, new_connections=refused,
               exit_code=code, exit_s=f"{exit_s:.1f}",
               consumers_left=len(consumers(redis.url)))
        assert all(b.rstrip().endswith(b"data: [DONE]") for b in bodies)
        assert refused == "refused"
        assert complete == STREAMS
        assert code == 0  # a clean drain after one SIGTERM: what a supervisor asked for
        assert '"event": "shutdown_complete"' in log and "shutdown failed" not in log
        assert consumers(redis.url) == []  # it left the consumer group


JOURNAL_TURNS = 12
JOURNAL_CONVERSATIONS = 3


def _journal_lines(data_dir: Path) -> tuple[int, list[str]]:
    files = sorted(data_dir.glob("record-journal-*"))
    lines = sum(len(f.read_text().splitlines()) for f in files)
    return lines, [f"{f.name}:{stat.S_IMODE(f.stat().st_mode):o}" for f in files]


@pytest.mark.parametrize("outage", ["stopped", "hung"])
def test_turns_the_store_cannot_take_at_sigterm_are_journalled_and_stored_once_at_next_start(
        tmp_path, outage):
    """`stopped`: connections are refused. `hung` (SIGSTOP): nothing answers, so every store
    call must be bounded by a timeout for the shutdown to end."""
    with Processes(tmp_path) as procs:
        redis = procs.redis()
        grace = {"shutdown_timeout_seconds": 5, "store_timeout_seconds": 0.5}
        drain = 1
        config = gateway_config_file(tmp_path / "config.yaml", redis.url, server=grace,
                                     recorder={"drain_timeout_seconds": drain,
                                               "buffer_retry_max_seconds": 0.5})
        data_dir = tmp_path / "data"
        gateway = procs.gateway(config, workers=2)
        if outage == "hung":
            redis.signal(signal.SIGSTOP)
        else:
            redis.stop()
        ledger = Ledger()
        names = [f"journal-{c}" for c in range(JOURNAL_CONVERSATIONS)]

        async def chat() -> None:
            async with httpx.AsyncClient(timeout=20) as client:
                async def one(name: str) -> None:
                    for n in range(JOURNAL_TURNS // JOURNAL_CONVERSATIONS):
                        ok, error = await send_turn(client, gateway.url, name, n,
                                                    stream=n % 2 == 1)
                        ledger.sent(name, n, ok, error)
                await asyncio.gather(*(one(name) for name in names))

        asyncio.run(chat())
        started = time.monotonic()
        # Bounded: in-flight requests (none) + tasks and buffer drains + the worker's drain.
        code = gateway.terminate(grace["shutdown_timeout_seconds"] + 4 * drain + 15)
        exit_s = time.monotonic() - started
        first_log = gateway.log_text()
        spilled, files = _journal_lines(data_dir)

        if outage == "hung":
            redis.signal(signal.SIGCONT)
        else:
            redis.start()
        again = procs.gateway(config, workers=2)
        stored = _wait_stored(redis.url, ledger, timeout=30)
        wait_all_applied(redis.url, names, timeout=30)
        counts = ledger.check(transcripts(redis.url, names))
        deadline = time.monotonic() + 10
        while list(data_dir.glob("record-journal-*")) and time.monotonic() < deadline:
            time.sleep(0.1)  # released once every replayed turn is in the store
        left_after = sorted(f.name for f in data_dir.glob("record-journal-*"))
        replay_log = again.log_text()
        report(f"journal (redis {outage} at SIGTERM, 2 workers; restart with redis back)",
               turns_sent=JOURNAL_TURNS, completed=counts["completed"], exit_code=code,
               exit_s=f"{exit_s:.1f}", journal_lines=spilled, journal_files=len(files),
               stored_once=counts["stored"], lost=counts["lost"],
               duplicated=counts["duplicated"], out_of_order=counts["out_of_order"],
               journal_files_left=len(left_after))
        assert counts["completed"] == JOURNAL_TURNS and counts["failed_requests"] == 0
        assert code == 0
        assert "Application shutdown failed" not in first_log
        assert '"event": "record_journal_spilled"' in first_log
        assert "record_buffer_dropped" not in first_log
        assert spilled == JOURNAL_TURNS, files
        assert files and all(f.endswith(":600") for f in files), files
        assert '"event": "record_journal_replayed"' in replay_log
        assert stored == JOURNAL_TURNS
        assert counts["stored"] == JOURNAL_TURNS and counts["lost"] == 0
        assert counts["duplicated"] == 0 and counts["out_of_order"] == 0, counts
        assert counts["replies_missing"] == 0 and counts["unknown"] == 0, counts
        assert left_after == []


def _wait_stored(redis_url: str, ledger: Ledger, timeout: float) -> int:
    """Poll until every completed turn is stored; returns how many are (once or more)."""
    deadline = time.monotonic() + timeout
    while True:
        counts = ledger.check(transcripts(redis_url, ledger.names))
        done = counts["stored"] + counts["duplicated"]
        if done >= counts["completed"] or time.monotonic() > deadline:
            return done
        time.sleep(0.2)
