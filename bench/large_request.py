"""`python -m bench large-request`: what one tenant's multi-megabyte request does to another
tenant's latency on the same serving process.

One `gateway serve` (one serving process, its memory worker, the embedded store; the soak's
configuration: bench/soak/cli.py) in front of the standalone fake upstream. Per door, in that
door's wire form: tenant `acme` sends a stateless conversation of `--messages` messages
(~`--megabytes` MB) once, so it is stored; then windows alternate — `baseline` (only tenant
`globex`'s small requests, one after another) and `during` (the same, while `acme` resends its
whole conversation, one new turn each time, back to back: the reply it got — the fake `echo`
model's, the last user message — and a new question). With `--regenerate` each resend replaces
the last reply instead (a client's "regenerate": the stored transcript branches at its end every
time). Reports `globex`'s p50 in each and
their ratio (target: ≤ 2), and how long the large requests took. Writes FILE.json and FILE.md
and stops every child it started.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.dialects import DIALECTS, PATHS, in_dialect
from bench.machine import machine
from bench.output import write_result
from bench.overhead.processes import (ChildServer, ChildServers, free_port,
                                      stop_children_on_sigterm, stop_pidfile_process)
from bench.overhead.stack import child_env, source_info
from bench.soak.cli import UPSTREAM_KEY_ENV, gateway_config, tenant_keys
from gateway.config.request import RequestLimitsConfig

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "large-request.json"
HOST = "127.0.0.1"
MAX_MESSAGES = RequestLimitsConfig().max_messages
WORDS = ("river", "budget", "violin", "harbour", "ledger", "orchard", "signal", "lantern",
         "cobalt", "meadow", "quartz", "saddle", "thimble", "walnut", "zephyr", "anchor")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench large-request", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--doors", default=",".join(DIALECTS))
    parser.add_argument("--messages", type=int, default=2001)
    parser.add_argument("--megabytes", type=float, default=3.9)
    parser.add_argument("--windows", type=int, default=3,
                        help="baseline/during pairs per door (default 3)")
    parser.add_argument("--large-per-window", type=int, default=4,
                        help="large requests in each `during` window (default 4)")
    parser.add_argument("--small-per-baseline", type=int, default=40,
                        help="small requests in each baseline window (default 40)")
    parser.add_argument("--regenerate", action="store_true",
                        help="each resend replaces the last reply (a branch at the end)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    args.doors = [d for d in args.doors.split(",") if d]
    if any(d not in DIALECTS for d in args.doors) or args.messages < 3 or args.windows < 1:
        parser.error(f"doors among {DIALECTS}; at least 3 messages and 1 window")
    # Each resend adds two messages; the system prompt is one more.
    sent = args.messages + 1 + 2 * args.windows * args.large_per_window
    if sent > MAX_MESSAGES:
        parser.error(f"the last resend would carry {sent:,} messages, over the gateway's "
                     f"request_limits.max_messages ({MAX_MESSAGES:,}, OpenAI's own limit): "
                     "fewer --messages, --windows or --large-per-window")
    return args


def sentence(seed: int, chars: int) -> str:
    """`chars` characters of varied words (each message distinct)."""
    words, i = [f"#{seed}"], seed
    while sum(len(w) + 1 for w in words) < chars:
        i = (i * 1103515245 + 12345) & 0x7FFFFFFF
        words.append(WORDS[i % len(WORDS)])
    return " ".join(words)[:chars]


def large_history(messages: int, megabytes: float) -> list[dict[str, str]]:
    """`messages` alternating user/assistant messages (user last) of ~`megabytes` in all."""
    chars = int(megabytes * 1_000_000 / messages) - 40  # JSON framing of each message
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": sentence(i, chars)}
            for i in range(messages)]


def body_for(door: str, messages: list[dict[str, str]]) -> bytes:
    chat = {"model": "echo", "messages": [{"role": "system", "content": "Be brief."},
                                          *messages]}
    return json.dumps(in_dialect(chat, door)).encode()


async def post(session: aiohttp.ClientSession, url: str, body: bytes,
               headers: dict[str, str]) -> tuple[int, float]:
    t0 = time.perf_counter()
    async with session.post(url, data=body, headers={**headers,
                                                     "Content-Type": "application/json"}) as r:
        await r.read()
    return r.status, (time.perf_counter() - t0) * 1000


async def measure_door(base: str, door: str, args: argparse.Namespace) -> dict[str, Any]:
    keys = tenant_keys()
    url = base + PATHS[door]
    big_headers = {"Authorization": f"Bearer {keys['acme']}", "X-User-Id": "big",
                   "X-Conversation-Id": f"big-{door}"}
    small_headers = {"Authorization": f"Bearer {keys['globex']}", "X-User-Id": "small",
                     "X-Conversation-Id": f"small-{door}"}
    history = large_history(args.messages, args.megabytes)
    small = body_for(door, [{"role": "user", "content": "What is the capital of Peru?"}])
    out: dict[str, Any] = {"door": door, "baseline_ms": [], "during_ms": [], "large_ms": [],
                           "errors": 0, "body_bytes": len(body_for(door, history))}
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        status, first = await post(session, url, body_for(door, history), big_headers)
        out["first_large_ms"], out["errors"] = round(first, 1), int(status != 200)
        for _ in range(3):  # the small conversation exists before anything is measured
            await post(session, url, small, small_headers)
        for _ in range(args.windows):
            for _ in range(args.small_per_baseline):
                status, ms = await post(session, url, small, small_headers)
                out["errors"] += status != 200
                out["baseline_ms"].append(ms)
            busy = asyncio.Event()

            async def large() -> None:
                busy.set()
                for n in range(args.large_per_window):
                    # The reply the echo model gave (the last user message), or another one.
                    reply = "Noted." if args.regenerate else history[-1]["content"]
                    history.extend([{"role": "assistant", "content": reply},
                                    {"role": "user", "content": f"And next, step {n}?"}])
                    status, ms = await post(session, url, body_for(door, history),
                                            big_headers)
                    out["errors"] += status != 200
                    out["large_ms"].append(ms)
                busy.clear()

            task = asyncio.create_task(large())
            await busy.wait()
            while busy.is_set():
                status, ms = await post(session, url, small, small_headers)
                out["errors"] += status != 200
                if busy.is_set():
                    out["during_ms"].append(ms)
            await task
    return out


def summarise(row: dict[str, Any]) -> dict[str, Any]:
    def p50(values: list[float]) -> float | None:
        return round(statistics.median(values), 1) if values else None

    base, during = p50(row["baseline_ms"]), p50(row["during_ms"])
    return {**{k: v for k, v in row.items() if not k.endswith("_ms")},
            "first_large_ms": row["first_large_ms"],
            "baseline_p50_ms": base, "during_p50_ms": during,
            "during_max_ms": round(max(row["during_ms"]), 1) if row["during_ms"] else None,
            "ratio": round(during / base, 2) if base and during else None,
            "large_p50_ms": p50(row["large_ms"]), "small_during": len(row["during_ms"]),
            "small_baseline": len(row["baseline_ms"])}


def markdown(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    m = meta["machine"]
    lines = [f"# Another tenant's latency beside a {meta['megabytes']:g} MB request", "",
             f"{meta['date']} · {m['cores']} cores, {m['cpu_model']} · Python {m['python']} · "
             f"commit {meta['source']['commit'][:10]}"
             + (" (with uncommitted changes)" if meta["source"]["uncommitted_changes"] else ""),
             "", "One `gateway serve` (one serving process, memory worker, embedded store) in "
             f"front of the fake upstream. Tenant acme resends a stateless conversation of "
             f"{meta['messages']:,} messages back to back ("
             + ("each time replacing the last reply: a regenerate"
                if meta["regenerate"] else "a new turn each time, the reply it got")
             + "); tenant globex "
             "sends one small request after another. `baseline`: globex alone; `during`: "
             "globex's requests that started and ended while acme's were in flight. Windows "
             "alternate. Target: during p50 ≤ 2 × baseline p50. Shared machine.", "",
             "| door | body MB | first send ms | large p50 ms | globex baseline p50 ms | "
             "during p50 ms | during max ms | ratio | small requests (base/during) | errors |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['door']} | {r['body_bytes'] / 1e6:.2f} | {r['first_large_ms']} | "
                     f"{r['large_p50_ms']} | {r['baseline_p50_ms']} | {r['during_p50_ms']} | "
                     f"{r['during_max_ms']} | {r['ratio']} | {r['small_baseline']}/"
                     f"{r['small_during']} | {r['errors']} |")
    lines += ["", f"Command: `{meta['command']}`", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    stop_children_on_sigterm()
    args = parse_args(argv)
    source = source_info()  # the code the children start with
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-large-") as tmp:
        workdir = Path(tmp)
        data_dir = workdir / "gateway-data"
        fake_port, port = free_port(), free_port()
        fake_url, url = f"http://{HOST}:{fake_port}", f"http://{HOST}:{port}"
        config = workdir / "gateway.yaml"
        config.write_text(json.dumps(gateway_config(data_dir, fake_url), indent=2))
        gateway = [sys.executable, "-m", "gateway"]
        try:
            with ChildServers() as servers:
                servers.start(ChildServer(
                    "fake-upstream", gateway + ["fake-upstream", "--host", HOST, "--port",
                                                str(fake_port)],
                    f"{fake_url}/healthz", workdir / "fake-upstream.log", env=child_env()))
                servers.start(ChildServer(
                    "gateway", gateway + ["serve", "--config", str(config), "--host", HOST,
                                          "--port", str(port), "--workers", "1",
                                          "--log-level", "warning"],
                    f"{url}/readyz", workdir / "gateway.log",
                    env={**child_env(), UPSTREAM_KEY_ENV: "unused"}, cwd=workdir))
                for door in args.doors:
                    row = summarise(asyncio.run(measure_door(url, door, args)))
                    print(f"[large-request] {door}: baseline p50 {row['baseline_p50_ms']} ms, "
                          f"during p50 {row['during_p50_ms']} ms (x{row['ratio']}), large p50 "
                          f"{row['large_p50_ms']} ms, errors {row['errors']}", flush=True)
                    rows.append(row)
        finally:
            stop_pidfile_process(data_dir / "redis.pid")
    meta = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(), "source": source, "messages": args.messages,
            "megabytes": args.megabytes, "regenerate": args.regenerate,
            "command": "python -m bench large-request " + " ".join(
                sys.argv[1:] if argv is None else argv)}
    write_result(args.out, {"meta": meta, "rows": rows}, markdown(meta, rows), indent=1)
    return 0
