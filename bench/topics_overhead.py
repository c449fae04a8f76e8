"""What topic tracking costs a request: the in-process app, `memory.topics` off vs on.

`python -m bench topics-overhead [--requests 600] [--out bench/results/topics-overhead.md]`

Two apps in one event loop, identical but for `tenants.acme.memory.topics.enabled`, each on an
embedded store of its own; requests alternate between them (bench/ab.py). Each request is a stateful client's new message in a conversation that
grows to 40 turns (then a new one starts), memory on (test embedder), with a topic switch
every 10 turns, so the topic state exists and changes. On, the request reads the current
topic in its pipelined memory reads and sets the header and the log field; off, neither.
Between requests — untimed — each app's recorder and memory worker apply the turn (the topic
tracker among them when on), as a worker process would.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

import httpx

from bench.ab import Times, alternate, embedded_stores, report, running, worker_steps
from bench.overhead.processes import stop_children_on_sigterm
from gateway.http.app import create_app
from gateway.config import hash_key, parse_config

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


async def _run(stores: dict[str, str], requests: int, warmup: int) -> Times:
    apps = {name: create_app(_config(url, name == "on")) for name, url in stores.items()}
    headers_seen = 0

    def request(i: int) -> tuple[dict[str, Any], dict[str, str]]:
        subject = SUBJECTS[(i // 10) % len(SUBJECTS)]
        return ({"model": "echo", "messages": [{"role": "user", "content":
                    f"Question {i} about the {subject}: what about the {subject} on day "
                    f"{i % 7}?"}]},
                {"Authorization": "Bearer k", "X-User-Id": "u",
                 "X-Conversation-Id": f"bench-{i // TURNS_PER_CONVERSATION}"})

    async with running(apps) as clients:
        steps = worker_steps(apps)

        async def between(name: str, response: httpx.Response) -> None:
            nonlocal headers_seen
            assert ("x-gateway-topic" in response.headers) <= (name == "on")
            headers_seen += "x-gateway-topic" in response.headers
            await steps(name, response)

        times = await alternate(clients, requests, warmup, request, between)
    assert headers_seen, "topics on, yet no request carried a topic"
    return times


def main(argv: list[str]) -> int:
    stop_children_on_sigterm()
    parser = argparse.ArgumentParser(prog="python -m bench topics-overhead")
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--warmup", type=int, default=60)
    parser.add_argument("--out", type=Path, default=Path("bench/results/topics-overhead.md"))
    args = parser.parse_args(argv)
    with embedded_stores("off", "on", prefix="gw-topic-") as stores:
        times = asyncio.run(_run(stores, args.requests, args.warmup))
    text = report(
        "Topic tracking overhead on the request path (in process)",
        f"python -m bench topics-overhead --requests {args.requests}", "topics",
        f"a stateful client in conversations of {TURNS_PER_CONVERSATION} turns switching "
        "subject every 10, memory and recall on; the recorder and memory worker run untimed "
        "between requests", times)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0
