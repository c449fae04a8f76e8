"""What keeping requests for the memory console costs a request: console off vs on.

`python -m bench console-overhead [--requests 1000] [--out bench/results/console-overhead.md]`

Two apps in one event loop on one embedded store, identical but for `console.enabled`;
requests alternate between them (bench/ab.py), each a stateless client's 20-message history
plus a new question, with a conversation id and memory on (test embedder),
`X-Gateway-Persist: false` so the transcript stays the same throughout. With the console on,
each request is queued for the request history (the tenant's capped stream and the
conversation's last request), which one background task writes: what the request path pays
is the queueing, and sharing the event loop with that writer.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from bench.ab import Times, alternate, embedded_stores, history, report, running
from bench.overhead.processes import stop_children_on_sigterm
from gateway.http.app import create_app
from gateway.config import hash_key, parse_config


def _config(store: str, console: bool) -> Any:
    return parse_config({
        "store": store, "recorder": {"mode": "external"},
        "memory": {"embedder": {"kind": "hash"}},
        "admin": {"keys": [{"sha256": hash_key("admin")}]},
        "console": {"enabled": console},
        "tenants": {"acme": {"api_keys": [{"sha256": hash_key("k")}],
                             "models": {"echo": {"model": "fake/echo"}}}}})


async def _run(store: str, requests: int, warmup: int) -> tuple[Times, int]:
    apps = {"off": create_app(_config(store, False)), "on": create_app(_config(store, True))}
    earlier = history(20)

    def request(i: int) -> tuple[dict[str, Any], dict[str, str]]:
        return ({"model": "echo", "messages": [
                    *earlier, {"role": "user", "content": f"And now question {i}?"}]},
                {"Authorization": "Bearer k", "X-Conversation-Id": "bench", "X-User-Id": "u",
                 "X-Gateway-Persist": "false"})

    async with running(apps) as clients:
        times = await alternate(clients, requests, warmup, request)
        history_writer = apps["on"].state.gateway.history
        await history_writer.flush()
        written = history_writer.written
    return times, written


def main(argv: list[str]) -> int:
    stop_children_on_sigterm()
    parser = argparse.ArgumentParser(prog="python -m bench console-overhead")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path("bench/results/console-overhead.md"))
    args = parser.parse_args(argv)
    with embedded_stores("shared", prefix="gw-console-") as stores:
        times, written = asyncio.run(_run(stores["shared"], args.requests, args.warmup))
    text = report(
        "Console request-history overhead (in process)",
        f"python -m bench console-overhead --requests {args.requests}", "console",
        "a 20-message history, memory on, persistence off", times,
        note=f"Request-history entries written by the background writer: {written} (every "
             "request of the `on` app, warm-up included).")
    args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0
