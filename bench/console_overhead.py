"""What keeping requests for the memory console costs a request: console off vs on.

`python -m bench console-overhead [--requests 1000] [--out bench/results/console-overhead.md]`

Two apps in one event loop on one embedded store, identical but for `console.enabled`;
requests alternate between them (drift, GC and the machine's load hit both alike), each a
stateless client's 20-message history plus a new question, with a conversation id and memory
on (test embedder), `X-Gateway-Persist: false` so the transcript stays the same throughout.
With the console on, each request is queued for the request history (the tenant's capped
stream and the conversation's last request), which one background task writes: what the
request path pays is the queueing, and sharing the event loop with that writer.
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
from bench.tracing_overhead import _history, _quantile
from gateway.app import create_app
from gateway.config import hash_key, parse_config
from gateway.store import EmbeddedRedis


def _config(store: str, console: bool) -> Any:
    return parse_config({
        "store": store, "recorder": {"mode": "external"},
        "memory": {"embedder": {"kind": "hash"}},
        "admin": {"keys": [{"sha256": hash_key("admin")}]},
        "console": {"enabled": console},
        "tenants": {"acme": {"api_keys": [{"sha256": hash_key("k")}],
                             "models": {"echo": {"model": "fake/echo"}}}}})


async def _run(store: str, requests: int, warmup: int) -> tuple[dict[str, list[float]], int]:
    apps = {"off": create_app(_config(store, False)), "on": create_app(_config(store, True))}
    times: dict[str, list[float]] = {name: [] for name in apps}
    history = _history(20)
    async with apps["off"].router.lifespan_context(apps["off"]), \
            apps["on"].router.lifespan_context(apps["on"]):
        clients = {name: httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                           base_url="http://gateway")
                   for name, app in apps.items()}
        try:
            for i in range(warmup + requests):
                for name in (("off", "on") if i % 2 else ("on", "off")):
                    body = {"model": "echo", "messages": [
                        *history, {"role": "user", "content": f"And now question {i}?"}]}
                    started = time.perf_counter()
                    response = await clients[name].post(
                        "/v1/chat/completions", json=body,
                        headers={"Authorization": "Bearer k", "X-Conversation-Id": "bench",
                                 "X-User-Id": "u", "X-Gateway-Persist": "false"})
                    elapsed = (time.perf_counter() - started) * 1000
                    assert response.status_code == 200, response.text
                    if i >= warmup:
                        times[name].append(elapsed)
        finally:
            for client in clients.values():
                await client.aclose()
        history_writer = apps["on"].state.gateway.history
        await history_writer.flush()
        written = history_writer.written
    return times, written


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench console-overhead")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path("bench/results/console-overhead.md"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gw-console-") as directory:
        server = EmbeddedRedis(Path(directory))
        server.start()
        try:
            times, written = asyncio.run(_run(server.url, args.requests, args.warmup))
        finally:
            server.stop()
    m = machine()
    rows = [f"| console {name} | {len(t)} | {statistics.median(t):.3f} | "
            f"{_quantile(t, 0.9):.3f} | {_quantile(t, 0.99):.3f} |" for name, t in times.items()]
    delta = statistics.median(times["on"]) - statistics.median(times["off"])
    text = "\n".join([
        "# Console request-history overhead (in process)", "",
        f"`python -m bench console-overhead --requests {args.requests}`: {m['cores']} cores, "
        f"{m['cpu_model']}, Python {m['python']}.", "",
        "Per request, ms, through the in-process app (httpx ASGI transport, fake upstream, "
        "a 20-message history, memory on, persistence off), off and on alternating:", "",
        "| | requests | p50 | p90 | p99 |", "|---|---:|---:|---:|---:|", *rows, "",
        f"Median difference (on − off): {delta:+.3f} ms. Request-history entries written by "
        f"the background writer: {written} (every request of the `on` app, warm-up "
        "included).", ""])
    args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0
