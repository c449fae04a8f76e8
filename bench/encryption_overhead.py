"""What encryption at rest costs a request: the in-process app, encryption off vs on.

`python -m bench encryption-overhead [--requests 600] [--out bench/results/encryption-overhead.md]`

Two apps in one event loop, identical but for `encryption`, each on an embedded store of its
own; requests alternate between them (bench/ab.py).
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
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.ab import Times, alternate, embedded_stores, report, running, worker_steps
from bench.overhead.processes import stop_children_on_sigterm
from gateway.http.app import create_app
from gateway.config import hash_key, parse_config
from gateway.store.encryption.crypto import DataKey, TenantCipher

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


async def _run(stores: dict[str, str], requests: int, warmup: int) -> Times:
    apps = {name: create_app(_config(url, name == "on")) for name, url in stores.items()}

    def request(i: int) -> tuple[dict[str, Any], dict[str, str]]:
        return ({"model": "echo", "messages": [{"role": "user", "content":
                    f"Question {i}: what about the harbour at dusk, and the boats that came "
                    f"in on day {i % 7}?"}]},
                {"Authorization": "Bearer k", "X-User-Id": "u",
                 "X-Conversation-Id": f"bench-{i // TURNS_PER_CONVERSATION}"})

    async with running(apps) as clients:
        return await alternate(clients, requests, warmup, request, worker_steps(apps))


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


def main(argv: list[str]) -> int:
    stop_children_on_sigterm()
    parser = argparse.ArgumentParser(prog="python -m bench encryption-overhead")
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--warmup", type=int, default=60)
    parser.add_argument("--out", type=Path,
                        default=Path("bench/results/encryption-overhead.md"))
    args = parser.parse_args(argv)
    os.environ.setdefault(KEY_ENV, base64.b64encode(os.urandom(32)).decode())
    with embedded_stores("off", "on", prefix="gw-enc-") as stores:
        times = asyncio.run(_run(stores, args.requests, args.warmup))
    costs = {chars: _cipher_cost(chars, 20_000) for chars in (300, 3000)}
    text = report(
        "Encryption at rest overhead (in process)",
        f"python -m bench encryption-overhead --requests {args.requests}", "encryption",
        f"a stateful client in conversations of {TURNS_PER_CONVERSATION} turns, memory and "
        "recall on, persistence on; the recorder and memory worker run untimed between "
        "requests", times,
        after=("AES-256-GCM alone (`TenantCipher`, base64 and the version prefix included), "
               "µs:", "", "| characters | seal | open |", "|---:|---:|---:|",
               *(f"| {chars} | {seal:.1f} | {opened:.1f} |"
                 for chars, (seal, opened) in costs.items()), ""))
    args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0
