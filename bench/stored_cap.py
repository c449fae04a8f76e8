"""What the stored-messages cap buys on the request path, and what a move costs.

`python -m bench stored-cap [--cap 10000] [--lengths 10000 40000] [--runs 7]` prints a table
and writes `bench/results/stored-cap.json` and `.md`. Real parts: an embedded Valkey in a
temporary directory, RedisStore (its transcript cache and archive) and `core.reconcile`.
Per conversation length (messages; a user message and its ~40-token reply per turn), two
stores of the same branch: `uncapped` (every message in the live transcript, as without the
cap) and `capped` (the oldest beyond `--cap` moved to the archive by `TranscriptArchive.trim`,
as the memory worker does). Medians over `--runs`:
- `cold_load_ms`: a replica's first load of the conversation (an empty transcript cache: the
  live list is read and decoded);
- `reconcile_ms`: a stateful request (one new message) reconciled with the loaded transcript
  (`core.reconcile` compares it with every stored message);
- `load_ms`: a request's load at the steady state, after a turn (a user message and its
  reply) was appended — and for `capped`, the two oldest messages moved: the cache decodes
  only the new elements either way;
- `worker_ms`: the memory worker's store work per turn: its read of the whole branch
  (`RedisStore.applied`: archive + transcript, both through their caches) and, for `capped`,
  the move of the oldest messages beyond the cap (`TranscriptArchive.trim`: three round trips);
- `full re-reads`: loads in those turns that had to read the whole transcript (0: the cache
  followed the moves).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.machine import machine
from bench.output import write_result
from bench.overhead.processes import stop_children_on_sigterm
from gateway.core.ids import ConversationKey
from gateway.core.messages import Message, chain
from gateway.core.transcript import reconcile
from gateway.store import EmbeddedRedis, RedisStore, connect
from gateway.store.codec import encode_stored

TEXT = ("I finally repaired the old bicycle my grandfather left me; the chain was rusted "
        "through, so I ordered a new one from the shop near the harbour. ")


def _messages(start: int, count: int) -> tuple[Message, ...]:
    return tuple(Message.of("user" if i % 2 == 0 else "assistant", f"{TEXT}({i})")
                 for i in range(start, start + count))


def _ms(seconds: list[float]) -> float:
    return round(statistics.median(seconds) * 1000, 3)


async def _fill(client: Any, store: RedisStore, key: ConversationKey, length: int,
                cap: int | None) -> None:
    ck = store.keys.conversation(key)
    branch = chain(None, _messages(0, length))
    for start in range(0, length, 5000):
        await client.rpush(ck.transcript, *(encode_stored(m) for m in branch[start:start + 5000]))
    if cap is not None:
        while await store.archive.trim(key, branch, cap):
            pass


async def _case(url: str, length: int, cap: int | None, runs: int) -> dict[str, Any]:
    client = connect(url)
    try:
        key = ConversationKey("bench", "user", f"c-{length}-{cap}")
        await _fill(client, RedisStore(client), key, length, cap)
        cold, rec = [], []
        for _ in range(runs):
            store = RedisStore(client)  # an empty cache: a replica's first load
            started = time.perf_counter()
            stored = await store.load(key)
            cold.append(time.perf_counter() - started)
            new = (Message.of("user", "And what should I do about the brakes?"),)
            started = time.perf_counter()
            reconcile(new, stored)
            rec.append(time.perf_counter() - started)
        store = RedisStore(client)
        stored = await store.load(key)
        branch = await store.applied(key)
        ck = store.keys.conversation(key)
        loads, work = [], []
        misses = store.cache.misses
        for n in range(runs):
            turn = chain(stored[-1].id, _messages(length + 2 * n, 2))
            await client.rpush(ck.transcript, *(encode_stored(m) for m in turn))
            started = time.perf_counter()
            stored = await store.load(key)
            loads.append(time.perf_counter() - started)
            started = time.perf_counter()
            branch = await store.applied(key)
            if cap is not None:
                await store.archive.trim(key, branch, cap)
            work.append(time.perf_counter() - started)
        return {"length": length, "case": "uncapped" if cap is None else "capped",
                "live": len(stored), "cold_load_ms": _ms(cold), "reconcile_ms": _ms(rec),
                "load_ms": _ms(loads), "worker_ms": _ms(work),
                "full_rereads": store.cache.misses - misses}
    finally:
        await client.aclose()


def _markdown(result: dict[str, Any]) -> str:
    lines = [f"# Stored-messages cap (cap {result['cap']:,}, median of {result['runs']} runs)",
             "", (f"`{result['command']}` on {result['machine']['cpu_model']} "
                  f"({result['machine']['cores']} cores, Python {result['machine']['python']})."),
             "",
             ("| messages | store | live | cold load ms | reconcile ms | load ms | worker ms "
              "| full re-reads |"),
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['length']:,} | {r['case']} | {r['live']:,} | {r['cold_load_ms']} "
                     f"| {r['reconcile_ms']} | {r['load_ms']} | {r['worker_ms']} "
                     f"| {r['full_rereads']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    stop_children_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap", type=int, default=10_000)
    parser.add_argument("--lengths", type=int, nargs="+", default=[10_000, 40_000])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path("bench/results/stored-cap.json"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedRedis(Path(tmp))
        server.start()
        try:
            rows = [asyncio.run(_case(server.url, length, cap, args.runs))
                    for length in args.lengths for cap in (None, args.cap)]
        finally:
            server.stop()
    result = {"cap": args.cap, "runs": args.runs, "machine": machine(), "rows": rows,
              "command": "python -m bench stored-cap " + " ".join(argv or sys.argv[1:])}
    write_result(args.out, result, _markdown(result))
    return 0
