"""The worker process's job latency and retries reach `/metrics` of the serving process (they
meet in the store): real redis-server, a real `gateway serve` with its worker process."""

from __future__ import annotations

import time

import httpx
import redis

from gateway.ops.job_metrics import KINDS
from tests.support.processes import AUTH, Processes, gateway_config_file


def _samples(text: str) -> dict[str, float]:
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}


def test_worker_job_latency_and_retries_are_scraped_from_the_serving_process(tmp_path):
    with Processes(tmp_path) as procs:
        server = procs.redis()
        config = gateway_config_file(tmp_path / "config.yaml", server.url,
                                     recorder={"mode": "process", "max_attempts": 3,
                                               "backoff_seconds": 0.05})
        gateway = procs.gateway(config)
        # A record job no recorder can parse: retried twice, then dead-lettered.
        with redis.Redis.from_url(server.url) as client:
            client.xadd("gw:records", {"tenant": "acme", "user": "-",
                                       "conversation": "broken", "seq": "x", "payload": "{"})
        with httpx.Client(timeout=20) as http:
            for n in range(3):
                response = http.post(gateway.url + "/v1/chat/completions", json={
                    "model": "echo", "messages": [{"role": "user",
                                                   "content": f"My name is Orla, turn {n}."}]},
                    headers={**AUTH, "X-Conversation-Id": "measured", "X-User-Id": "orla"})
                assert response.status_code == 200, response.text
            deadline = time.monotonic() + 30
            while True:  # the worker works on its own time: wait for it, not for a duration
                samples = _samples(http.get(gateway.url + "/metrics").text)
                counts = {kind: samples.get(
                    f'gateway_worker_job_seconds_count{{kind="{kind}"}}', 0) for kind in KINDS}
                done = counts["record_apply"] >= 3 and samples.get(
                    "gateway_record_dead_letters") == 1 and all(counts.values()) \
                    and samples.get("gateway_embedder_batch_size_count", 0) > 0
                if done or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
    assert counts["record_apply"] >= 3, counts
    assert all(counts[kind] >= 1 for kind in KINDS), counts
    assert samples['gateway_worker_job_seconds_bucket{kind="record_apply",le="+Inf"}'] \
        == counts["record_apply"]
    assert samples['gateway_worker_job_seconds_sum{kind="record_apply"}'] > 0
    assert samples['gateway_worker_job_retries_total{queue="record"}'] == 2
    assert samples["gateway_record_dead_letters"] == 1
    # The worker's embedding calls: each embedded at least one text, at most max_batch (64).
    calls = samples["gateway_embedder_batch_size_count"]
    assert calls >= 1 and samples['gateway_embedder_batch_size_bucket{le="64"}'] == calls
    assert samples["gateway_embedder_batch_size_sum"] >= calls
