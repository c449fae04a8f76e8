"""`python -m bench load`: sustained throughput, latency and memory of 1..N gateway replicas.

For each replica count: a fresh redis-server (AOF, everysec) and the standalone fake upstream
on loopback, N gateway processes (`gateway serve`, one worker each, through litellm to the
fake) sharing that Redis, and an aiohttp load generator holding `--concurrency` requests in
flight round-robin across the replicas for `--duration` seconds (after a warm-up that is not
measured). Each client is a stateful conversation of `--turns` turns, then starts a new one,
so the store grows as it would in use. Every few seconds it samples each process's resident
memory (VmRSS from /proc). Writes FILE.json, FILE.md and FILE.png and stops every child it
started — also on errors and Ctrl-C.

Bounded: at most `--max-requests` per run, and the run ends at its deadline whatever happens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import aiohttp
import yaml

from bench.machine import rss_mb
from bench.output import write_result
from bench.overhead.processes import ChildServer, ChildServers, free_port, stop_children_on_sigterm

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "results" / "load.json"
API_KEY = "bench-load-key"
HOST = "127.0.0.1"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench load", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", default="1,2", help="comma-separated counts (default 1,2)")
    parser.add_argument("--duration", type=float, default=300.0,
                        help="measured seconds per replica count (default 300)")
    parser.add_argument("--warmup", type=float, default=15.0, help="unmeasured seconds first")
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--turns", type=int, default=20,
                        help="turns per conversation before a client starts a new one")
    parser.add_argument("--stream-every", type=int, default=4,
                        help="every k-th request streams (0: none)")
    parser.add_argument("--max-requests", type=int, default=500_000,
                        help="upper bound on requests per run")
    parser.add_argument("--sample-seconds", type=float, default=5.0,
                        help="memory sampling interval")
    parser.add_argument("--embedder", choices=("use", "hash"), default="use",
                        help="the memory embedder: the product's default (use), or the test "
                             "stand-in (hash) to measure everything but embedding")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    args.replicas = [int(r) for r in str(args.replicas).split(",") if r.strip()]
    if not args.replicas or min(args.replicas) < 1 or args.concurrency < 1 \
            or args.duration <= 0 or args.turns < 1:
        parser.error("replicas, concurrency, duration and turns must be positive")
    return args


@dataclass
class Run:
    replicas: int
    latencies_ms: list[float] = field(default_factory=list)
    completed_at: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    rss: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    wall_s: float = 0.0



def write_config(path: Path, store: str, fake_url: str, embedder: str = "use") -> Path:
    import hashlib

    path.write_text(yaml.safe_dump({
        "store": store,
        "server": {"data_dir": str(path.parent / "data")},
        "recorder": {"workers": 1},
        "memory": {"embedder": {"backend": embedder}},
        "tenants": {"bench": {
            "api_keys": [{"sha256": hashlib.sha256(API_KEY.encode()).hexdigest()}],
            "models": {"echo": {"model": "openai/echo", "api_base": fake_url + "/v1",
                                "api_key_env": "BENCH_FAKE_KEY"}},
            "context": {"max_context_tokens": 8000, "reserve_completion_tokens": 1000},
        }},
    }))
    return path


async def load(urls: list[str], args: argparse.Namespace, run: Run,
               pids: dict[str, int]) -> None:
    """Requests at fixed concurrency until the deadline; latencies only after the warm-up."""
    started = time.monotonic()
    measure_from = started + args.warmup
    stop_at = measure_from + args.duration
    budget = args.max_requests
    counter = 0

    async def client(index: int) -> None:
        nonlocal budget, counter
        conversation, turn = 0, 0
        while time.monotonic() < stop_at and budget > 0:
            budget -= 1
            counter += 1
            if turn >= args.turns:
                conversation, turn = conversation + 1, 0
            turn += 1
            url = urls[counter % len(urls)] + "/v1/chat/completions"
            stream = bool(args.stream_every) and counter % args.stream_every == 0
            body: dict[str, Any] = {"model": "echo", "stream": stream, "messages": [
                {"role": "user", "content": f"client {index} conversation {conversation} turn "
                                            f"{turn}: please remember the number {counter}."}]}
            headers = {"Authorization": f"Bearer {API_KEY}",
                       "X-Conversation-Id": f"load-{run.replicas}-{index}-{conversation}"}
            t0 = time.monotonic()
            try:
                async with session.post(url, json=body, headers=headers) as response:
                    payload = await response.read()
                ok = response.status == 200 and (not stream or payload.rstrip().endswith(
                    b"data: [DONE]"))
                error = "" if ok else f"HTTP {response.status}: {payload[:120]!r}"
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                ok, error = False, f"{type(exc).__name__}: {exc}"
            t1 = time.monotonic()
            if t0 >= measure_from and t1 <= stop_at:
                if ok:
                    run.latencies_ms.append((t1 - t0) * 1000)
                    run.completed_at.append(t1 - measure_from)
                else:
                    run.errors.append(error)

    async def sampler() -> None:
        while time.monotonic() < stop_at:
            t = time.monotonic() - measure_from
            for name, pid in pids.items():
                mb = rss_mb(pid)
                if mb is not None:
                    run.rss.setdefault(name, []).append((round(t, 1), round(mb, 1)))
            await asyncio.sleep(args.sample_seconds)

    connector = aiohttp.TCPConnector(limit=args.concurrency)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=30)) as session:
        await asyncio.gather(sampler(), *(client(i) for i in range(args.concurrency)))
    run.wall_s = args.duration


def measure(replicas: int, args: argparse.Namespace, workdir: Path) -> Run:
    run = Run(replicas)
    work = workdir / f"r{replicas}"
    (work / "redis").mkdir(parents=True)
    redis_port, fake_port = free_port(), free_port()
    with redis_server(redis_port, work / "redis") as redis_pid, ChildServers() as servers:
        fake = servers.start(ChildServer(
            "fake-upstream", [sys.executable, "-m", "gateway", "fake-upstream", "--port",
                              str(fake_port)], f"http://{HOST}:{fake_port}/healthz",
            work / "fake.log"))
        config = write_config(work / "config.yaml", f"redis://{HOST}:{redis_port}/0",
                              f"http://{HOST}:{fake_port}", args.embedder)
        pids = {"redis": redis_pid, "fake-upstream": fake.pid or 0}
        urls = []
        for i in range(replicas):
            port = free_port()
            gateway = servers.start(ChildServer(
                f"gateway-{i + 1}", [sys.executable, "-m", "gateway", "serve", "--config",
                                     str(config), "--host", HOST, "--port", str(port),
                                     "--workers", "1", "--log-level", "warning"],
                f"http://{HOST}:{port}/readyz", work / f"gateway-{i + 1}.log",
                env={"BENCH_FAKE_KEY": "unused"}))
            urls.append(f"http://{HOST}:{port}")
            pids[f"gateway-{i + 1}"] = gateway.pid or 0
        print(f"[load] {replicas} replica(s): warm-up {args.warmup:.0f}s, then "
              f"{args.duration:.0f}s at concurrency {args.concurrency}", flush=True)
        asyncio.run(load(urls, args, run, pids))
    return run


@contextlib.contextmanager
def redis_server(port: int, directory: Path) -> Iterator[int]:
    """redis-server (AOF on) on a loopback port, its pid yielded; always stopped."""
    import redis as redis_py

    with open(directory / "redis.log", "ab") as log:
        proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", HOST,
                                 "--save", "", "--appendonly", "yes", "--dir", str(directory)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                with redis_py.Redis(host=HOST, port=port, socket_timeout=1) as client:
                    client.ping()
                break
            except redis_py.RedisError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start on port {port}")
                time.sleep(0.05)
        yield proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def summarise(run: Run, duration: float) -> dict[str, Any]:
    lat = sorted(run.latencies_ms)

    def pct(p: float) -> float | None:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))], 2) if lat else None

    per_10s: dict[int, int] = {}
    for t in run.completed_at:
        per_10s[int(t // 10)] = per_10s.get(int(t // 10), 0) + 1
    memory = memory_summary(run.rss)
    return {
        "replicas": run.replicas, "requests": len(lat), "errors": len(run.errors),
        "error_examples": sorted(set(run.errors))[:5],
        "rps": round(len(lat) / duration, 1),
        "p50_ms": pct(0.50), "p99_ms": pct(0.99),
        "mean_ms": round(statistics.fmean(lat), 2) if lat else None,
        "rps_per_10s": [round(per_10s.get(i, 0) / 10, 1) for i in range(int(duration // 10))],
        "memory": memory, "rss_series": run.rss,
    }


def memory_summary(rss: dict[str, list[tuple[float, float]]]) -> dict[str, dict[str, float]]:
    """Per process: resident MB at the end of the warm-up (t = 0) and at the end, the growth
    between them, and the peak. Samples before t = 0 (start-up, first requests) are left out:
    the first imports and caches are not growth."""
    memory = {}
    for name, series in rss.items():
        measured = [(t, mb) for t, mb in series if t >= 0] or list(series)
        if measured:
            memory[name] = {"start_mb": measured[0][1], "end_mb": measured[-1][1],
                            "growth_mb": round(measured[-1][1] - measured[0][1], 1),
                            "max_mb": max(mb for _, mb in measured)}
    return memory


def markdown(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = [f"# Load: {', '.join(str(r['replicas']) for r in rows)} replica(s) on one Redis",
             "", f"{meta['date']} · {meta['machine']} · Python {meta['python']} · "
             f"concurrency {meta['concurrency']} · {meta['duration_s']:.0f} s measured per run "
             f"after {meta['warmup_s']:.0f} s warm-up · every {meta['stream_every']}th request "
             f"streamed · {meta['turns']} turns per conversation", "",
             "Everything on one machine over loopback: redis-server (AOF), the standalone fake "
             "upstream, the gateways (one uvicorn worker each, through litellm) and the aiohttp "
             "load generator share its cores.", "",
             "Memory is resident set size (VmRSS) sampled every few seconds, from the end of the "
             "warm-up to the end of the run.", "",
             "| replicas | requests | errors | req/s | p50 ms | p99 ms | gateway RSS start → end "
             "(growth) MB | redis RSS start → end MB |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        mem = row["memory"]
        gw = "; ".join(f"{v['start_mb']:.0f} → {v['end_mb']:.0f} ({v['growth_mb']:+.0f})"
                       for k, v in sorted(mem.items()) if k.startswith("gateway"))
        rd = mem.get("redis", {})
        lines.append(f"| {row['replicas']} | {row['requests']} | {row['errors']} | {row['rps']} "
                     f"| {row['p50_ms']} | {row['p99_ms']} | {gw} | "
                     f"{rd.get('start_mb', 0):.0f} → {rd.get('end_mb', 0):.0f} |")
    lines += ["", "Throughput per 10 s window (req/s): " + "; ".join(
        f"{r['replicas']} replica(s): min {min(r['rps_per_10s'] or [0])}, "
        f"max {max(r['rps_per_10s'] or [0])}" for r in rows), "",
        f"Command: `{meta['command']}`", ""]
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for row in rows:
        xs = [10 * i + 5 for i in range(len(row["rps_per_10s"]))]
        left.plot(xs, row["rps_per_10s"], label=f"{row['replicas']} replica(s)")
        for name, series in sorted(row["rss_series"].items()):
            if name.startswith("gateway"):
                right.plot([t for t, _ in series], [mb for _, mb in series],
                           label=f"{row['replicas']} replica(s): {name}")
    left.set(title="Sustained throughput", xlabel="s", ylabel="requests/s")
    right.set(title="Gateway resident memory", xlabel="s", ylabel="MB")
    left.legend(), right.legend(fontsize=8)
    left.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    stop_children_on_sigterm()
    args = parse_args(argv)
    os.environ.setdefault("BENCH_FAKE_KEY", "unused")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp:
        for replicas in args.replicas:
            run = measure(replicas, args, Path(tmp))
            row = summarise(run, args.duration)
            print(f"[load] {replicas} replica(s): {row['rps']} req/s, p50 {row['p50_ms']} ms, "
                  f"p99 {row['p99_ms']} ms, errors {row['errors']}", flush=True)
            rows.append(row)
    meta = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "python": platform.python_version(), "concurrency": args.concurrency,
            "duration_s": args.duration, "warmup_s": args.warmup, "turns": args.turns,
            "stream_every": args.stream_every, "embedder": args.embedder,
            "command": "python -m bench load " + " ".join(sys.argv[1:] if argv is None
                                                           else argv)}
    write_result(args.out, {"meta": meta, "runs": rows}, markdown(meta, rows), indent=1)
    plot(rows, args.out.with_suffix(".png"))
    return 0
