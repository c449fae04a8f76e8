"""`python -m bench soak`: the gateway under a steady mixed load for a long while, and how its
resident memory moves after the warm-up.

One `gateway serve` process (one serving process, its memory worker process, its embedded
store) in front of the standalone fake upstream, on loopback. Clients of three tenants, two
users each, talk through all three doors (Chat Completions, Messages, Responses), stateless
and stateful, every `--stream-every`th request streamed; each conversation grows for
`--turns` turns, then the client starts a new one. Together they send `--rate` requests per
second for `--warmup-minutes` (not measured), then `--minutes`. The resident memory (VmRSS)
of the serving process, the worker and the store is read at the end of the warm-up, every
`--sample-seconds` after it and at the end. Nothing is deleted unless `--retire-minutes` is
given: then every conversation idle that long is deleted through the user control API as the
run goes, so that what the users hold (and the indexes over it) stays about the same. Writes
FILE.json and FILE.md and stops every child it started — also on errors, Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import hashlib
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.machine import machine
from bench.output import write_result
from bench.overhead.processes import (ChildServer, ChildServers, descendants, free_port,
                                      stop_children_on_sigterm, stop_pidfile_process)
from bench.overhead.stack import child_env, source_info
from bench.soak.drive import Tally, drive
from bench.soak.traffic import DOORS, clients

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "results" / "soak.json"
HOST = "127.0.0.1"
TENANTS = ("acme", "globex", "initech")
PROCESSES = ("gateway", "worker", "store")
INDEXES = "indexes"
"""The serving process's search indexes (their estimate, `gateway_memory_index_bytes`)."""
UPSTREAM_KEY_ENV = "BENCH_UPSTREAM_KEY"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench soak", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0, help="measured (default 30)")
    parser.add_argument("--warmup-minutes", type=float, default=3.0,
                        help="load before the first RSS reading that counts (default 3)")
    parser.add_argument("--rate", type=float, default=8.0,
                        help="requests per second, all clients together (default 8)")
    parser.add_argument("--users", type=int, default=2, help="users per tenant (default 2)")
    parser.add_argument("--turns", type=int, default=40,
                        help="turns per conversation before a client starts a new one")
    parser.add_argument("--stream-every", type=int, default=4,
                        help="every k-th request of a client streams (0: none)")
    parser.add_argument("--sample-seconds", type=float, default=60.0)
    parser.add_argument("--no-memory", dest="memory", action="store_false",
                        help="tenants without memory (to tell memory's growth from the rest)")
    parser.add_argument("--index-cache-mb", type=int, default=None,
                        help="memory.index.cache_mb (default: the gateway's); a budget the "
                             "warm-up fills shows what grows besides the bounded indexes")
    parser.add_argument("--retire-minutes", type=float, default=None,
                        help="delete every conversation idle this long through the user "
                             "control API as the run goes, so that what the users hold stops "
                             "growing (default: keep everything)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.warmup_minutes < 0 or args.rate <= 0 or args.users < 1 \
            or args.turns < 1 or args.sample_seconds <= 0 \
            or (args.index_cache_mb is not None and args.index_cache_mb < 2) \
            or (args.retire_minutes is not None and args.retire_minutes <= 0):
        parser.error("minutes, rate, users, turns, sample-seconds and retire-minutes must be "
                     "positive, index-cache-mb at least 2")
    return args


def tenant_keys() -> dict[str, str]:
    return {tenant: f"soak-{tenant}-key" for tenant in TENANTS}


def gateway_config(data_dir: Path, fake_url: str, memory: bool = True,
                   index_cache_mb: int | None = None) -> dict[str, Any]:
    """Embedded store, the worker in its own process (the defaults), three tenants routed to
    the fake upstream as an OpenAI-compatible provider (`memory` on or off), the search
    indexes' budget when given. JSON is valid YAML."""
    route = {"model": "openai/echo", "api_base": f"{fake_url}/v1",
             "api_key_env": UPSTREAM_KEY_ENV}
    return {
        "server": {"data_dir": str(data_dir)},
        "store": "embedded",
        **({} if index_cache_mb is None else
           {"memory": {"index": {"cache_mb": index_cache_mb}}}),
        "tenants": {tenant: {
            "api_keys": [{"sha256": hashlib.sha256(key.encode()).hexdigest()}],
            "models": {"echo": route},
            "context": {"max_context_tokens": 8000, "reserve_completion_tokens": 1000},
            "memory": {"enabled": memory},
        } for tenant, key in tenant_keys().items()},
    }


def process_finder(gateway_pid: int, data_dir: Path):  # type: ignore[no-untyped-def]
    """A function naming the pids of the serving process, its worker and its store right now
    (the worker and the store are looked up each time: either may have been restarted)."""
    def find() -> dict[str, int]:
        found = {"gateway": gateway_pid}
        try:
            found["store"] = int((data_dir / "redis.pid").read_text().strip())
        except (OSError, ValueError):
            pass
        for pid in descendants(gateway_pid):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"worker" in argv and b"gateway" in argv:
                found["worker"] = pid
        return found
    return find


def run(args: argparse.Namespace, workdir: Path) -> tuple[Tally, int]:
    tally = Tally()
    data_dir = workdir / "gateway-data"
    fake_port, port = free_port(), free_port()
    fake_url, url = f"http://{HOST}:{fake_port}", f"http://{HOST}:{port}"
    config = workdir / "gateway.yaml"
    config.write_text(json.dumps(gateway_config(data_dir, fake_url, args.memory,
                                                   args.index_cache_mb), indent=2))
    argv = [sys.executable, "-m", "gateway"]
    try:
        with ChildServers() as servers:
            servers.start(ChildServer(
                "fake-upstream", argv + ["fake-upstream", "--host", HOST, "--port",
                                         str(fake_port)],
                f"{fake_url}/healthz", workdir / "fake-upstream.log", env=child_env()))
            gateway = servers.start(ChildServer(
                "gateway", argv + ["serve", "--config", str(config), "--host", HOST, "--port",
                                   str(port), "--workers", "1", "--log-level", "warning"],
                f"{url}/readyz", workdir / "gateway.log",
                env={**child_env(), UPSTREAM_KEY_ENV: "unused"}, cwd=workdir))
            population = clients(tenant_keys(), args.users, args.turns, args.stream_every)
            print(f"[soak] {len(population)} clients, {args.rate} req/s: warm-up "
                  f"{args.warmup_minutes} min, then {args.minutes} min", flush=True)
            asyncio.run(drive(url, population, args.rate, args.warmup_minutes * 60,
                              args.minutes * 60, args.sample_seconds,
                              process_finder(gateway.pid or 0, data_dir), tally,
                              None if args.retire_minutes is None else args.retire_minutes * 60))
            restarts = log_count(workdir / "gateway.log", "worker_exited")
    finally:
        stop_pidfile_process(data_dir / "redis.pid")
    return tally, restarts


def log_count(path: Path, word: str) -> int:
    try:
        return path.read_text(errors="replace").count(word)
    except OSError:
        return 0


def summarise(tally: Tally) -> dict[str, Any]:
    measured = [s for s in tally.rss if s["t"] >= 0]
    memory = {}
    for name in (*PROCESSES, INDEXES):
        series = [s[name] for s in measured if name in s]
        if series:
            memory[name] = {"start_mb": series[0], "end_mb": series[-1], "max_mb": max(series),
                            "growth_pct": round(100 * (series[-1] - series[0])
                                                / max(series[0], 0.1), 1)}
    latency = {}
    for door, values in tally.latencies_ms.items():
        values = sorted(values)
        latency[door] = {"requests": len(values),
                         "p50_ms": round(statistics.median(values), 1),
                         "p99_ms": round(values[min(len(values) - 1, int(0.99 * len(values)))],
                                         1)}
    return {"memory": memory, "latency": latency, "outcomes": dict(tally.outcomes),
            "error_examples": tally.error_examples, "rss": tally.rss}


def markdown(meta: dict[str, Any], result: dict[str, Any]) -> str:
    m = meta["machine"]
    ok = sum(v for k, v in result["outcomes"].items() if k in DOORS)
    per_door = ", ".join(f"{d} {result['outcomes'].get(d, 0):,}" for d in DOORS)
    lines = [f"# Soak: {meta['minutes']:g} minutes after a {meta['warmup_minutes']:g}-minute "
             "warm-up", "",
             f"{meta['date']} · {m['cores']} cores, {m['cpu_model']} · Python {m['python']} · "
             f"commit {meta['source']['commit'][:10]}"
             + (" (with uncommitted changes)" if meta["source"]["uncommitted_changes"] else ""),
             "", f"One `gateway serve` (one serving process, the memory worker process, the "
             f"embedded store) in front of the fake upstream; {meta['clients']} clients (3 "
             f"tenants × {meta['users']} users × 3 doors × stateless/stateful) at "
             f"{meta['rate']:g} req/s together, conversations of {meta['turns']} turns, every "
             f"{meta['stream_every']}th request of a client streamed"
             + ("" if meta.get("memory", True) else ", tenants' memory off")
             + ("" if meta.get("index_cache_mb") is None
                else f", `memory.index.cache_mb: {meta['index_cache_mb']}`")
             + ("" if meta.get("retire_minutes") is None
                else f", conversations idle {meta['retire_minutes']:g} minutes deleted as the "
                     "run goes (what the users hold stops growing)")
             + ". Shared machine.", "",
             f"Requests answered: {ok:,} ({per_door}); "
             f"errors: {result['outcomes'].get('error', 0)}; worker exits (restarted): "
             f"{meta['worker_restarts']}"
             + ("" if meta.get("retire_minutes") is None
                else f"; conversations deleted: {result['outcomes'].get('retired', 0):,}")
             + ".", "",
             "| process | RSS after warm-up MB | at the end MB | peak MB | growth |",
             "|---|---:|---:|---:|---:|"]
    for name, v in result["memory"].items():
        lines.append(f"| {name} | {v['start_mb']:.1f} | {v['end_mb']:.1f} | {v['max_mb']:.1f} "
                     f"| {v['growth_pct']:+.1f} % |")
    lines += ["", "| door | requests (measured) | p50 ms | p99 ms |", "|---|---:|---:|---:|"]
    for door, v in result["latency"].items():
        lines.append(f"| {door} | {v['requests']:,} | {v['p50_ms']} | {v['p99_ms']} |")
    lines += ["", "RSS every sample (MB; t in minutes from the end of the warm-up):", "",
              "| t min | " + " | ".join(PROCESSES) + f" | {INDEXES} (of gateway) |",
              "|---:|" + "---:|" * (len(PROCESSES) + 1)]
    for s in result["rss"]:
        lines.append(f"| {s['t'] / 60:.1f} | "
                     + " | ".join(f"{s[p]:.1f}" if p in s else "–"
                                  for p in (*PROCESSES, INDEXES)) + " |")
    if result["error_examples"]:
        lines += ["", "Errors (first few):", ""] + [f"- `{e}`" for e in result["error_examples"]]
    lines += ["", f"Command: `{meta['command']}`", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    stop_children_on_sigterm()
    args = parse_args(argv)
    source = source_info()  # the code the children start with, not what HEAD is at the end
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp:
        tally, restarts = run(args, Path(tmp))
    result = summarise(tally)
    meta = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(), "source": source, "minutes": args.minutes,
            "warmup_minutes": args.warmup_minutes, "rate": args.rate, "users": args.users,
            "clients": len(TENANTS) * args.users * 6, "turns": args.turns,
            "stream_every": args.stream_every, "worker_restarts": restarts,
            "memory": args.memory, "index_cache_mb": args.index_cache_mb,
            "retire_minutes": args.retire_minutes,
            "command": "python -m bench soak " + " ".join(sys.argv[1:] if argv is None
                                                           else argv)}
    write_result(args.out, {"meta": meta, **result}, markdown(meta, result), indent=1)
    return 0
