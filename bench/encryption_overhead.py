"""What encryption at rest costs a request: the in-process app, encryption off vs on.

`python -m bench encryption-overhead [--requests 600] [--out bench/results/encryption-overhead.md]`

Two apps in one event loop, identical but for `encryption`, each on an embedded store of its
own; requests alternate between them (so drift, GC and the machine's load hit both alike).
Each request is a stateful client's new message in a conversation that grows to 40 turns
(then a new one starts), memory on (test embedder), persistence on: the request path opens
the transcript's new elements, the pending turns and every recalled entry, and seals the
turn it enqueues. Between requests — untimed — each app's recorder and memory worker apply
the turn and index it (sealing what they store), as a worker process would. Also timed
alone: sealing and opening one text.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
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
from gateway.store.crypto import DataKey, TenantCipher
from gateway.store.recorder import Recorder

KEY_ENV = "GATEWAY_BENCH_ENCRYPTION_KEY"
TURNS_PER_CONVERSATION = 40


def _config(store: str, encrypted: bool) -> Any:
    return parse_config({
        "store": store, "recorder": {"mode": "external"},
        "memory": {"embedder": {"kind": "hash"}},
        **({"encryption": {"key_env": KEY_ENV}} if encrypted else {}),
        "server": {"data_dir": tempfile.mkdtemp(prefix="gw-enc-bench-")},
        "tenants": {"acme": {"api_keys": [{"sha256": hash_key("k")}],
                             "models": {"echo": {"model": "fake/echo"}}}}})


async def _run(stores: dict[str, str], requests: int, warmup: int) -> dict[str, list[float]]:
    apps = {name: create_app(_config(url, name == "on")) for name, url in stores.items()}
    times: dict[str, list[float]] = {name: [] for name in apps}
    async with apps["off"].router.lifespan_context(apps["off"]), \
            apps["on"].router.lifespan_context(apps["on"]):
        gateways = {name: app.state.gateway for name, app in apps.items()}
        recorders = {name: Recorder(g.store.client, consumer_prefix=f"bench-{name}",
                                    encryption=g.store.encryption)
                     for name, g in gateways.items()}
        clients = {name: httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                           base_url="http://gateway")
                   for name, app in apps.items()}
        try:
            for i in range(warmup + requests):
                conversation = f"bench-{i // TURNS_PER_CONVERSATION}"
                for name in (("off", "on") if i % 2 else ("on", "off")):
                    body = {"model": "echo", "messages": [{"role": "user", "content":
                            f"Question {i}: what about the harbour at dusk, and the boats "
                            f"that came in on day {i % 7}?"}]}
                    started = time.perf_counter()
                    response = await clients[name].post(
                        "/v1/chat/completions", json=body,
                        headers={"Authorization": "Bearer k", "X-Conversation-Id": conversation,
                                 "X-User-Id": "u"})
                    elapsed = (time.perf_counter() - started) * 1000
                    assert response.status_code == 200, response.text
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
    return times


def _cipher_cost(chars: int, calls: int) -> tuple[float, float]:
    """Microseconds per seal and per open of a text of `chars` characters."""
    cipher = TenantCipher("acme", DataKey(os.urandom(32)))
    text = ("The lights come on one by one along the harbour. " * (chars // 50 + 1))[:chars]
    started = time.perf_counter()
    sealed = [cipher.seal(text) for _ in range(calls)]
    seal_us = (time.perf_counter() - started) / calls * 1e6
    started = time.perf_counter()
    for item in sealed:
        cipher.open(item)
    return seal_us, (time.perf_counter() - started) / calls * 1e6


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench encryption-overhead")
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--warmup", type=int, default=60)
    parser.add_argument("--out", type=Path,
                        default=Path("bench/results/encryption-overhead.md"))
    args = parser.parse_args(argv)
    os.environ.setdefault(KEY_ENV, base64.b64encode(os.urandom(32)).decode())
    with tempfile.TemporaryDirectory(prefix="gw-enc-") as off_dir, \
            tempfile.TemporaryDirectory(prefix="gw-enc-") as on_dir:
        servers = {"off": EmbeddedRedis(Path(off_dir)), "on": EmbeddedRedis(Path(on_dir))}
        for server in servers.values():
            server.start()
        try:
            times = asyncio.run(_run({n: s.url for n, s in servers.items()}, args.requests,
                                     args.warmup))
        finally:
            for server in servers.values():
                server.stop()
    costs = {chars: _cipher_cost(chars, 20_000) for chars in (300, 3000)}
    m = machine()
    rows = [f"| encryption {name} | {len(t)} | {statistics.median(t):.3f} | "
            f"{_quantile(t, 0.9):.3f} | {_quantile(t, 0.99):.3f} |" for name, t in times.items()]
    delta = statistics.median(times["on"]) - statistics.median(times["off"])
    cipher_rows = [f"| {chars} | {seal:.1f} | {opened:.1f} |"
                   for chars, (seal, opened) in costs.items()]
    text = "\n".join([
        "# Encryption at rest overhead (in process)", "",
        (f"`python -m bench encryption-overhead --requests {args.requests}`: {m['cores']} "
         f"cores, {m['cpu_model']}, Python {m['python']}."), "",
        ("Per request, ms, through the in-process app (httpx ASGI transport, fake upstream, a "
         f"stateful client in conversations of {TURNS_PER_CONVERSATION} turns, memory and "
         "recall on, persistence on; the recorder and memory worker run untimed between "
         "requests), off and on alternating:"), "",
        "| | requests | p50 | p90 | p99 |", "|---|---:|---:|---:|---:|", *rows, "",
        f"Median difference (on − off): {delta:+.3f} ms.", "",
        "AES-256-GCM alone (`TenantCipher`, base64 and the version prefix included), µs:", "",
        "| characters | seal | open |", "|---:|---:|---:|", *cipher_rows, ""])
    args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0
