"""`python -m bench ratelimit`: a shared rate limit holds across replicas under overload.

Issue 13's target: with a 60 rpm limit and 200 rpm offered for a minute, the requests accepted
stay within the limit ± 5 % across 2 replicas. This starts a fresh redis-server (AOF on) and
`--replicas` gateway processes (`gateway serve`, one uvicorn worker and the worker process
each, the built-in fake upstream `fake/echo`) sharing it, with one tenant limited to
`--rpm`. An open-loop generator offers `--offered` requests per minute for `--duration`
seconds: evenly spaced, each sent at its time whether or not the previous one has answered,
alternating replicas, each in a conversation of its own. It counts 200s and 429s (each 429
must carry Retry-After and OpenAI's error shape) and, once the worker processes are idle, the
conversations the store recorded (a refused request must record nothing).

Writes FILE.json and FILE.md (default bench/results/ratelimit.*) and stops every child.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import hashlib
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import redis
import yaml

from bench.load.cli import redis_server
from bench.machine import machine
from bench.output import write_result
from bench.overhead.processes import ChildServer, ChildServers, free_port, stop_children_on_sigterm

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "ratelimit.json"
API_KEY = "bench-ratelimit-key"
HOST = "127.0.0.1"
TOLERANCE = 0.05


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench ratelimit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rpm", type=int, default=60, help="the tenant's limit (default 60)")
    parser.add_argument("--offered", type=int, default=200,
                        help="requests per minute offered (default 200)")
    parser.add_argument("--duration", type=float, default=60.0,
                        help="seconds of offered load (default 60)")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if min(args.rpm, args.offered, args.replicas) < 1 or args.duration <= 0:
        parser.error("rpm, offered, replicas and duration must be positive")
    return args


def write_config(path: Path, store: str, rpm: int) -> Path:
    path.write_text(yaml.safe_dump({
        "store": store,
        "server": {"data_dir": str(path.parent / "data")},
        "memory": {"embedder": {"kind": "hash"}},
        "tenants": {"bench": {
            "api_keys": [{"sha256": hashlib.sha256(API_KEY.encode()).hexdigest()}],
            "rate_limits": {"requests_per_minute": rpm},
            "models": {"echo": {"model": "fake/echo"}},
        }},
    }))
    return path


async def offer(urls: list[str], args: argparse.Namespace) -> list[dict[str, Any]]:
    """One request every 60/offered seconds for `duration` seconds (open loop)."""
    interval = 60.0 / args.offered
    count = int(args.duration / interval)
    results: list[dict[str, Any]] = []

    async def one(session: aiohttp.ClientSession, n: int, at: float) -> None:
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        replica = n % len(urls)
        sent = time.monotonic()
        body = {"model": "echo", "messages": [{"role": "user", "content": f"request {n}"}]}
        headers = {"Authorization": f"Bearer {API_KEY}", "X-Conversation-Id": f"rl-{n}"}
        try:
            async with session.post(urls[replica] + "/v1/chat/completions", json=body,
                                    headers=headers) as response:
                payload = await response.json(content_type=None)
                status, retry_after = response.status, response.headers.get("retry-after")
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            status, retry_after, payload = 0, None, {"exception": repr(exc)}
        error = payload.get("error") if isinstance(payload, dict) else None
        results.append({"n": n, "replica": replica, "sent_s": round(sent - started, 3),
                        "status": status, "retry_after": retry_after,
                        "shape_ok": status != 429 or (
                            isinstance(error, dict)
                            and set(error) == {"message", "type", "param", "code"}
                            and error["code"] == "rate_limit_exceeded"
                            and retry_after is not None and retry_after.isdigit())})

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        started = time.monotonic() + 0.5
        await asyncio.gather(*(one(session, n, started + n * interval) for n in range(count)))
    return sorted(results, key=lambda r: r["n"])


def recorded_conversations(url: str, timeout: float = 30.0) -> int:
    """Conversations with a turn enqueued, once the record stream has no pending entries."""
    deadline = time.monotonic() + timeout
    with redis.Redis.from_url(url, decode_responses=True) as client:
        while time.monotonic() < deadline:
            try:
                pending = int(client.xpending("gw:records", "recorders")["pending"])
            except redis.ResponseError:
                pending = 0
            if pending == 0 and client.xlen("gw:records") == 0:
                break
            time.sleep(0.2)
        return sum(1 for _ in client.scan_iter("gw:c:*:seq", count=1000))


def summarise(results: list[dict[str, Any]], recorded: int,
              args: argparse.Namespace) -> dict[str, Any]:
    statuses = Counter(r["status"] for r in results)
    accepted = statuses.get(200, 0)
    per_replica = Counter(r["replica"] for r in results if r["status"] == 200)
    error = (accepted - args.rpm) / args.rpm
    return {
        "limit_rpm": args.rpm, "offered_rpm": args.offered, "duration_s": args.duration,
        "replicas": args.replicas, "offered": len(results), "accepted": accepted,
        "rejected_429": statuses.get(429, 0),
        "other": {str(k): v for k, v in statuses.items() if k not in (200, 429)},
        "accepted_per_replica": [per_replica.get(i, 0) for i in range(args.replicas)],
        "error_pct": round(100 * error, 2), "within_tolerance": abs(error) <= TOLERANCE,
        "last_accepted_s": max((r["sent_s"] for r in results if r["status"] == 200),
                               default=None),
        "rejections_well_formed": all(r["shape_ok"] for r in results),
        "retry_after_s": sorted({int(r["retry_after"]) for r in results
                                 if r["status"] == 429 and (r["retry_after"] or "").isdigit()}),
        "recorded_conversations": recorded,
    }


def markdown(meta: dict[str, Any], row: dict[str, Any]) -> str:
    m = meta["machine"]
    verdict = "within" if row["within_tolerance"] else "OUTSIDE"
    return "\n".join([
        f"# Rate limit across {row['replicas']} replicas", "",
        f"{meta['date']} · {m['cpu_model']}, {m['cores']} cores · Python {m['python']} · "
        f"{m['platform']}", "",
        f"A {row['limit_rpm']} rpm limit of one tenant, {row['offered_rpm']} rpm offered for "
        f"{row['duration_s']:.0f} s, open loop, alternating {row['replicas']} gateway processes "
        "on one redis-server (everything on this machine over loopback).", "",
        "| offered | accepted | 429 | other | accepted per replica | error vs limit | "
        "recorded conversations | 429s well formed |",
        "|---:|---:|---:|---|---|---:|---:|---|",
        f"| {row['offered']} | {row['accepted']} | {row['rejected_429']} | "
        f"{row['other'] or '–'} | {' / '.join(map(str, row['accepted_per_replica']))} | "
        f"{row['error_pct']:+.2f} % | {row['recorded_conversations']} | "
        f"{'yes' if row['rejections_well_formed'] else 'NO'} |", "",
        f"Accepted requests are {verdict} the limit ± {TOLERANCE:.0%} (issue 13's target). The "
        f"last request accepted was sent at {row['last_accepted_s']} s; Retry-After values "
        f"seen: {row['retry_after_s'][:1] + row['retry_after_s'][-1:]} s (first, last).", "",
        f"Command: `{meta['command']}`", ""])


def main(argv: list[str] | None = None) -> int:
    stop_children_on_sigterm()
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-ratelimit-") as tmp:
        work = Path(tmp)
        (work / "redis").mkdir()
        redis_port = free_port()
        with redis_server(redis_port, work / "redis"), ChildServers() as servers:
            store = f"redis://{HOST}:{redis_port}/0"
            config = write_config(work / "config.yaml", store, args.rpm)
            urls = []
            for i in range(args.replicas):
                port = free_port()
                servers.start(ChildServer(
                    f"gateway-{i + 1}", [sys.executable, "-m", "gateway", "serve", "--config",
                                         str(config), "--host", HOST, "--port", str(port),
                                         "--workers", "1", "--log-level", "warning"],
                    f"http://{HOST}:{port}/readyz", work / f"gateway-{i + 1}.log"))
                urls.append(f"http://{HOST}:{port}")
            print(f"[ratelimit] {args.offered} rpm offered for {args.duration:.0f} s to "
                  f"{args.replicas} replicas, limit {args.rpm} rpm", flush=True)
            results = asyncio.run(offer(urls, args))
            row = summarise(results, recorded_conversations(store), args)
    meta = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(),
            "command": " ".join(["gateway bench ratelimit",
                                 *(sys.argv[1:] if argv is None else argv)])}
    write_result(args.out, {"meta": meta, "result": row, "requests": results},
                 markdown(meta, row), indent=1)
    return 0 if row["within_tolerance"] and row["rejections_well_formed"] else 1
