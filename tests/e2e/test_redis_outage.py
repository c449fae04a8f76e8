"""A Redis outage never breaks the chat, and loses no turn while the record buffer has room.

Real redis-server (AOF), real gateway processes. While clients keep chatting, redis-server is
stopped and later started again on the same port and data dir. Every request must succeed
(forwarded unchanged while the store is down); the turns recorded meanwhile wait in each
replica's record buffer and are flushed when Redis is back: each stored exactly once, in order.
Overflow is tested apart with a tiny buffer: the dropped turns are counted and logged.
"""

from __future__ import annotations

import asyncio
import time

import httpx

from tests.support.processes import (AUTH, Ledger, Processes, chat_body, gateway_config_file,
                                     report, send_turn, transcripts, wait_all_applied)

CLIENTS = 6
TURNS = 16
STOP_AFTER, RESTART_AFTER = 20, 55  # completed turns (of 96) before each step
MIN_OUTAGE_S = 1.5


def _metric(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics", timeout=5).text
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith(name) and not line.startswith("#"))


def _wait_stored(redis_url: str, ledger: Ledger, timeout: float) -> dict[str, int]:
    """Poll until every completed turn is stored (buffers flushed); the last counts."""
    deadline = time.monotonic() + timeout
    while True:
        counts = ledger.check(transcripts(redis_url, ledger.names))
        if counts["stored"] + counts["duplicated"] >= counts["completed"] \
                or time.monotonic() > deadline:
            return counts
        time.sleep(0.2)


def test_redis_stopped_and_restarted_under_load_fails_no_request_and_loses_no_turn(tmp_path):
    with Processes(tmp_path) as procs:
        redis = procs.redis()
        config = gateway_config_file(tmp_path / "config.yaml", redis.url,
                                     recorder={"buffer_retry_max_seconds": 0.5})
        replicas = [procs.gateway(config), procs.gateway(config)]
        ledger = Ledger()
        during: dict[str, int] = {}

        def completed() -> int:
            return sum(map(len, ledger.completed.values())) + sum(map(len, ledger.failed.values()))

        async def chat() -> None:
            async with httpx.AsyncClient(timeout=20) as client:
                async def one(c: int) -> None:
                    name = f"outage-{c}"
                    url = replicas[c % 2].url  # sticky: a conversation stays on its replica
                    for n in range(TURNS):
                        try:
                            ok, error = await send_turn(client, url, name, n,
                                                        stream=n % 3 == 2)
                        except httpx.HTTPError as exc:
                            ok, error = False, repr(exc)
                        ledger.sent(name, n, ok, error)
                        await asyncio.sleep(0.2)  # a chat's pace: the outage spans many turns
                await asyncio.gather(*(one(c) for c in range(CLIENTS)))

        def operator() -> None:
            deadline = time.monotonic() + 60
            while completed() < STOP_AFTER:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            redis.stop()
            stopped = time.monotonic()
            during["stopped_at"] = completed()
            during["readyz"] = httpx.get(replicas[0].url + "/readyz", timeout=5).status_code
            during["healthz"] = httpx.get(replicas[0].url + "/healthz", timeout=5).status_code
            while completed() < RESTART_AFTER or time.monotonic() - stopped < MIN_OUTAGE_S:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            during["restarted_at"] = completed()
            redis.start()
            during["outage_ms"] = int((time.monotonic() - stopped) * 1000)

        async def scenario() -> None:
            await asyncio.gather(chat(), asyncio.to_thread(operator))

        started = time.monotonic()
        asyncio.run(scenario())
        counts = _wait_stored(redis.url, ledger, timeout=30)
        wait_all_applied(redis.url, ledger.names, timeout=30)
        counts = ledger.check(transcripts(redis.url, ledger.names))
        buffered = sum(_metric(r.url, "gateway_record_buffer_buffered") for r in replicas)
        flushed = sum(_metric(r.url, "gateway_record_buffer_flushed") for r in replicas)
        dropped = sum(_metric(r.url, "gateway_record_buffer_dropped") for r in replicas)
        ready_after = [httpx.get(r.url + "/readyz", timeout=5).status_code for r in replicas]
        report("redis outage (stop + restart under load, 2 replicas)",
               requests=CLIENTS * TURNS, requests_failed=counts["failed_requests"],
               sent_during_outage=during["restarted_at"] - during["stopped_at"],
               outage_ms=during["outage_ms"],
               buffered=int(buffered), flushed=int(flushed), dropped=int(dropped),
               turns_lost=counts["lost"], duplicated=counts["duplicated"],
               out_of_order=counts["out_of_order"],
               elapsed_s=f"{time.monotonic() - started:.1f}")
        assert counts["failed_requests"] == 0, ledger.errors[:5]
        assert during["readyz"] == 503 and during["healthz"] == 200
        assert ready_after == [200, 200]
        assert buffered >= 1 and flushed == buffered and dropped == 0
        assert counts["lost"] == 0 and counts["duplicated"] == 0, counts
        assert counts["out_of_order"] == 0 and counts["unknown"] == 0, counts
        assert counts["replies_missing"] == 0, counts


def test_a_full_record_buffer_drops_the_oldest_turns_and_says_so(tmp_path):
    capacity, sent = 3, 8
    with Processes(tmp_path) as procs:
        redis = procs.redis()
        config = gateway_config_file(tmp_path / "config.yaml", redis.url,
                                     recorder={"buffer_capacity": capacity,
                                               "buffer_retry_max_seconds": 0.5})
        gateway = procs.gateway(config)
        redis.stop()
        names = [f"overflow-{i}" for i in range(sent)]
        with httpx.Client(timeout=20) as client:
            statuses = [client.post(gateway.url + "/v1/chat/completions",
                                    json=chat_body(name, 0),
                                    headers={**AUTH, "X-Conversation-Id": name}).status_code
                        for name in names]
        dropped = _metric(gateway.url, "gateway_record_buffer_dropped")
        redis.start()
        deadline = time.monotonic() + 20
        while _metric(gateway.url, "gateway_record_buffer_turns") and time.monotonic() < deadline:
            time.sleep(0.1)
        wait_all_applied(redis.url, names, timeout=20)
        stored = transcripts(redis.url, names)
        kept = [name for name in names if stored[name]]
        logged = gateway.log_text().count('"event": "record_buffer_dropped"')
        report("record buffer overflow (capacity 3, 8 turns during an outage)",
               requests_ok=statuses.count(200), dropped_metric=int(dropped),
               dropped_logged=logged, stored=len(kept), lost=sent - len(kept))
        assert statuses == [200] * sent
        assert dropped == sent - capacity and logged == sent - capacity
        assert kept == names[-capacity:]  # the oldest were dropped
