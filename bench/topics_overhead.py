"""What topic tracking costs a request: the in-process app, `memory.topics` off vs on.

`python -m bench topics-overhead [--requests 600] [--out bench/results/topics-overhead.md]`

Two apps in one event loop, identical but for `tenants.acme.memory.topics.enabled`, each on an
embedded store of its own; requests alternate between them (so drift, GC and the machine's
load hit both alike). Each request is a stateful client's new message in a conversation that
grows to 40 turns (then a new one starts), memory on (test embedder), with a topic switch
every 10 turns, so the topic state exists and changes. On, the request reads the current
topic in its pipelined memory reads and sets the header and the log field; off, neither.
Between requests — untimed — each app's recorder and memory worker apply the turn (the topic
tracker among them when on), as a worker process would.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.machine import machine
from gateway.app import create_app
from gateway.config import hash_key, parse_config
from gateway.store import EmbeddedRedis
from gateway.store.recorder import Recorder

TURNS_PER_CONVERSATION = 40
SUBJECTS = ("harbour boats dusk lights", "sourdough starter flour oven",
            "marathon training shoes pace", "violin lessons scales bow")


def _config(store: str, topics: bool) -> Any:
    return parse_config({
        "store": store, "recorder": {"mode": "external"},
        "memory": {"embedder": {"kind": "hash"}},
        "server": {"data_dir": tempfile.mkdtemp(prefix="gw-topic-bench-")},
        "tenants": {"acme": {"api_keys": [{"sha256": hash_key("k")}],
                             "models": {"echo": {"model": "fake/echo"}},
                             "memory": {"topics": {"enabled": topics}}}}})


async def _run(stores: dict[str, str], requests: int, warmup: int) -> dict[str, list[float]]:
    apps = {name: create_app(_config(url, name == "on")) for name, url in stores.items()}
    times: dict[str, list[float]] = {name: [] for name in apps}
    headers_seen = 0
    async with apps["off"].router.lifespan_context(apps["off"]), \
            apps["on"].router.lifespan_context(apps["on"]):
        gateways = {name: app.state.gateway for name, app in apps.items()}
        recorders = {name: Recorder(g.store.client, consumer_prefix=f"bench-{name}")
                     for name, g in gateways.items()}
        clients = {name: httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                           base_url="http://gateway")
                   for name, app in apps.items()}
        try:
            for i in range(warmup + requests):
                conversation = f"bench-{i // TURNS_PER_CONVERSATION}"
                subject = SUBJECTS[(i // 10) % len(SUBJECTS)]
                for name in (("off", "on") if i % 2 else ("on", "off")):
                    body = {"model": "echo", "messages": [{"role": "user", "content":
                            f"Question {i} about the {subject}: what about the {subject} "
                            f"on day {i % 7}?"}]}
                    started = time.perf_counter()
                    response = await clients[name].post(
                        "/v1/chat/completions", json=body,
                        headers={"Authorization": "Bearer k", "X-Conversation-Id": conversation,
                                 "X-User-Id": "u"})
                    elapsed = (time.perf_counter() - started) * 1000
                    assert response.status_code == 200, response.text
                    assert ("x-gateway-topic" in response.headers) <= (name == "on")
                    headers_seen += "x-gateway-topic" in response.headers
                    if i >= warmup:
                        times[name].append(elapsed)
                    # Untimed: what the worker process does with the turn.
                    await recorders[name].process_available()
                    memory = gateways[name].memory
                    assert memory is not None
                    await memory.worker.process_available()
        finally:
            for client in clients.values():
                await client.aclose()
    assert headers_seen, "topics on, yet no request carried a topic"
    return times


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench topics-overhead")
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--warmup", type=int, default=60)
    parser.add_argument("--out", type=Path, default=Path("bench/results/topics-overhead.md"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gw-topic-") as off_dir, \
            tempfile.TemporaryDirectory(prefix="gw-topic-") as on_dir:
        servers = {"off": EmbeddedRedis(Path(off_dir)), "on": EmbeddedRedis(Path(on_dir))}
        for server in servers.values():
            server.start()
        try:
            times = asyncio.run(_run({n: s.url for n, s in servers.items()}, args.requests,
                                     args.warmup))
        finally:
            for server in servers.values():
                server.stop()
    m = machine()
    rows = [f"| topics {name} | {len(t)} | {statistics.median(t):.3f} | "
            f"{_quantile(t, 0.9):.3f} | {_quantile(t, 0.99):.3f} |" for name, t in times.items()]
    delta = statistics.median(times["on"]) - statistics.median(times["off"])
    text = "\n".join([
        "# Topic tracking overhead on the request path (in process)", "",
        (f"`python -m bench topics-overhead --requests {args.requests}`: {m['cores']} "
         f"cores, {m['cpu_model']}, Python {m['python']}."), "",
        ("Per request, ms, through the in-process app (httpx ASGI transport, fake upstream, a "
         f"stateful client in conversations of {TURNS_PER_CONVERSATION} turns switching "
         "subject every 10, memory and recall on; the recorder and memory worker run untimed "
         "between requests), off and on alternating:"), "",
        "| | requests | p50 | p90 | p99 |", "|---|---:|---:|---:|---:|", *rows, "",
        f"Median difference (on − off): {delta:+.3f} ms.", ""])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0
