"""Several stateless replicas (and several uvicorn workers each) on one real redis-server — and
on a 3-master Valkey cluster — serve the same conversations: what one records, another sees;
record jobs spread over every worker of every replica; order per conversation holds; each
replica's in-process vector caches notice vectors another replica indexed, without restarts.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from tests.support.processes import (AUTH, STORES, Ledger, Processes, chat_body, consumers,
                                     gateway_config_file, report, send_turn, shared_store,
                                     transcripts, turn_text, wait_all_applied)

CLIENTS = 8
TURNS = 10


def _forwarded(response: httpx.Response) -> list[dict]:
    assert response.status_code == 200, response.text
    return json.loads(response.json()["choices"][0]["message"]["content"])


@pytest.mark.parametrize("store", STORES)
def test_two_replicas_serve_the_same_conversations_in_order_without_loss(tmp_path, store,
                                                                          request):
    with Processes(tmp_path) as procs:
        url, shards = shared_store(procs, store, request)
        # Recorders on the serving loops (`background`): every serving process is a consumer
        # of the record group, the most contended arrangement.
        config = gateway_config_file(tmp_path / "config.yaml", url, shards=shards,
                                     recorder={"mode": "background"})
        a, b = procs.gateway(config, workers=2), procs.gateway(config)

        # Read-your-writes across replicas: recorded through A, seen by B at once (the turn
        # may still be pending in the stream; B's load applies pending turns).
        with httpx.Client(timeout=20) as client:
            headers = {**AUTH, "X-Conversation-Id": "shared"}
            assert client.post(a.url + "/v1/chat/completions", headers=headers,
                               json=chat_body("shared", 0)).status_code == 200
            seen = _forwarded(client.post(b.url + "/v1/chat/completions", headers=headers,
                                          json=chat_body("shared", 1, model="messages")))
        assert [m["content"] for m in seen] == [turn_text("shared", 0)] * 2 + [
            turn_text("shared", 1)]

        # Load: every client alternates replicas request by request (no stickiness).
        ledger = Ledger()
        started = time.monotonic()

        async def chat() -> None:
            async with httpx.AsyncClient(timeout=20) as http:
                async def one(c: int) -> None:
                    # On a cluster, a user each: conversations spread over the shards.
                    name = f"replica-{c}@u{c}" if shards else f"replica-{c}"
                    for n in range(TURNS):
                        url = (a.url, b.url)[(c + n) % 2]
                        ok, error = await send_turn(http, url, name, n, stream=n % 3 == 1)
                        ledger.sent(name, n, ok, error)
                await asyncio.gather(*(one(c) for c in range(CLIENTS)))

        asyncio.run(chat())
        wait_all_applied(url, ledger.names + ["shared"], timeout=20, shards=shards)
        counts = ledger.check(transcripts(url, ledger.names, shards=shards))
        pids = {name.rsplit("-", 2)[-2] for name in consumers(url, shards=shards)}
        applied_b = _metric(b.url, "gateway_recorder_applied")
        report(f"replicas (2 gateways, 3 worker processes, {store})",
               turns_sent=CLIENTS * TURNS, consumer_processes=len(pids),
               applied_by_replica_b=int(applied_b),
               elapsed_s=f"{time.monotonic() - started:.1f}", **counts)
        assert counts["failed_requests"] == 0, ledger.errors[:3]
        assert counts["stored"] == CLIENTS * TURNS
        assert counts["lost"] == counts["duplicated"] == counts["out_of_order"] == 0, counts
        assert counts["replies_missing"] == 0 and counts["unknown"] == 0, counts
        assert len(pids) == 3  # A's two workers and B each run recorder consumers
        assert 0 < applied_b < CLIENTS * TURNS + 1  # B applied a share, not all


def _metric(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics", timeout=5).text
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith(name) and not line.startswith("#"))


def test_a_replica_recalls_turns_another_replica_indexed_after_its_cache_was_built(tmp_path):
    with Processes(tmp_path) as procs:
        redis = procs.redis()
        # The rolling window: two turns, so what is older is found only by recall.
        config = gateway_config_file(tmp_path / "config.yaml", redis.url,
                                     context={"max_recent_turns": 2, "assembly": "rolling"})
        a, b = procs.gateway(config), procs.gateway(config)
        headers = {**AUTH, "X-Conversation-Id": "recall", "X-User-Id": "u1"}

        def say(url: str, text: str, model: str = "echo") -> httpx.Response:
            return httpx.post(url + "/v1/chat/completions", headers=headers, timeout=20,
                              json={"model": model,
                                    "messages": [{"role": "user", "content": text}]})

        def indexed() -> None:
            wait_all_applied(redis.url, [], timeout=20)
            deadline = time.monotonic() + 20
            import redis as redis_py
            with redis_py.Redis.from_url(redis.url) as client:
                while client.zcard("gw:memory:dirty") and time.monotonic() < deadline:
                    time.sleep(0.05)

        # A long first turn: the history never fits the budget whole, so memory is used.
        for text in ("notes " * 2500, "my cat is called Tiberius", "I live near the harbour",
                     "the weather is grey today"):
            assert say(a.url, text).status_code == 200
        indexed()
        # B searches the namespace now: its caches are built from what is indexed so far.
        before = _forwarded(say(b.url, "what is my cat called?", "messages"))
        assert any("<memory>" in m["content"] and "Tiberius" in m["content"]
                   for m in before), [(m["role"], m["content"][:300]) for m in before]
        # A records a new fact, then pushes it out of the recent window.
        for text in ("my passport number ends in zebra-4417", "tell me a joke",
                     "and another one", "one more please"):
            assert say(a.url, text).status_code == 200
        indexed()
        forwarded = _forwarded(say(b.url, "what does my passport number end in?", "messages"))
        recalled = [m["content"] for m in forwarded if "<memory>" in m["content"]]
        recent = [m["content"] for m in forwarded if m["role"] in ("user", "assistant")]
        fresh = bool(recalled) and "zebra-4417" in recalled[0]
        report("replica cache freshness", recalled_turn_indexed_by_other_replica=fresh)
        assert fresh and not any("zebra-4417" in text for text in recent)
