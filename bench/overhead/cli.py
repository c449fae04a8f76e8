"""`python -m bench overhead`: measure the latency the gateway adds, next to LiteLLM's proxy.

Starts a fake upstream, the gateway (embedded store, through litellm to the fake) and LiteLLM's
proxy (to the same fake) as child processes, measures every target interleaved, writes
FILE.json, FILE.md and FILE.png, and stops every child it started — also on errors and Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import signal
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn

from bench.overhead.processes import Pinning
from bench.overhead.report import table, write_all
from bench.overhead.run import Plan, measure
from bench.overhead.stack import TARGETS, Stack

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "results" / "overhead.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench overhead", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300,
                        help="measured requests per target and cell, at least 6 x concurrency "
                             "(default 300)")
    parser.add_argument("--concurrency", type=_ints, default=(1, 10, 100),
                        help="comma-separated levels (default 1,10,100)")
    parser.add_argument("--targets", type=_targets, default=TARGETS,
                        help=f"comma-separated subset of {','.join(TARGETS)} (default: all; "
                             "direct is always measured, added latency needs it)")
    parser.add_argument("--stream", choices=("both", "no", "yes"), default="both")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per cell")
    parser.add_argument("--warmup", type=int, default=20,
                        help="warm-up requests before each measurement (at least concurrency)")
    parser.add_argument("--workers", type=int, default=1,
                        help="worker processes of the gateway and of LiteLLM's proxy alike")
    parser.add_argument("--history-turns", type=int, default=50)
    parser.add_argument("--persist-requests", type=int, default=100,
                        help="requests of the persistence-on run at c=1 (0 skips it)")
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to cores")
    parser.add_argument("--keep-workdir", action="store_true",
                        help="keep the temp dir with configs and server logs")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"JSON output; .md and .png beside it (default {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    if "direct" not in args.targets:
        args.targets = ("direct", *args.targets)
    if args.requests < 1 or args.rounds < 1 or args.workers < 1:
        parser.error("--requests, --rounds and --workers must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)  # a kill becomes an exception: children stopped
    plan = Plan(targets=args.targets, concurrency=args.concurrency,
                streams={"both": (False, True), "no": (False,), "yes": (True,)}[args.stream],
                requests=args.requests, rounds=args.rounds, warmup=args.warmup,
                history_turns=args.history_turns, persist_requests=args.persist_requests)
    pinning = Pinning.detect(enabled=not args.no_pin)
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    started_at = dt.datetime.now(dt.timezone.utc)
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    stack = Stack(workdir=workdir, pinning=pinning, workers=args.workers)
    _say(f"workdir {workdir}; pinning: "
         + (f"servers on core {pinning.server_core}, load + fake on core {pinning.load_core}"
            if pinning.used else "none"))
    try:
        pinning.pin_self()
        stack.start(plan.targets)
        _say("servers ready: " + ", ".join(f"{s}" for s in (
            stack.fake_url, stack.gateway_url, stack.litellm_url) if s))
        outcome = asyncio.run(measure(stack, plan, _say))
    finally:
        stack.stop()
        if affinity is not None:
            os.sched_setaffinity(0, affinity)
        if not args.keep_workdir:
            _remove(workdir)
    meta = _meta(args, plan, pinning, started_at, time.monotonic() - started, outcome.memory)
    meta["errors"] = outcome.errors
    meta["server_overhead_p50_ms"] = outcome.server_overhead_p50_ms
    paths = write_all(args.out, meta, outcome.results, {"persist_on": outcome.persist_on})
    print(table(outcome.results))
    if outcome.persist_on:
        print("\npersistence on (c=1, non-streaming):\n" + table(outcome.persist_on))
    _say(f"{meta['duration_s']:.0f} s; wrote " + ", ".join(str(p) for p in paths))
    if outcome.errors:
        _say(f"ERRORS in {len(outcome.errors)} measurement(s); see meta.errors")
        return 1
    return 0


def _meta(args: argparse.Namespace, plan: Plan, pinning: Pinning, started_at: dt.datetime,
          duration_s: float, memory: dict[str, Any]) -> dict[str, Any]:
    return {
        "machine": {"cores": os.cpu_count(), "cpu_model": _cpu_model(),
                    "python": platform.python_version(), "platform": platform.platform()},
        "versions": {"gateway": _version("context-gateway"), "litellm": _version("litellm"),
                     "aiohttp": _version("aiohttp")},
        "workers": args.workers,
        "pinning": {"used": pinning.used, "server_core": pinning.server_core,
                    "load_core": pinning.load_core},
        "requests_per_cell": {str(c): plan.per_round(c) * plan.rounds
                              for c in plan.concurrency},
        "rounds": plan.rounds,
        "warmup": plan.warmup,
        "memory": memory,
        "started": started_at.isoformat(timespec="seconds"),
        "duration_s": round(duration_s, 1),
        "load_generator": "aiohttp, one keep-alive connection per concurrent request",
        "latency": "non-streaming: until the whole body is read; streaming: first body bytes",
        "added": "target pXX - direct pXX over the same cell's interleaved rounds",
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _ints(text: str) -> tuple[int, ...]:
    values = tuple(int(v) for v in text.split(",") if v.strip())
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("expected positive integers, e.g. 1,10,100")
    return values


def _targets(text: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [n for n in names if n not in TARGETS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown target(s) {unknown}; choose from {TARGETS}")
    return tuple(t for t in TARGETS if t in names)  # canonical order


def _terminate(signum: int, frame: object) -> NoReturn:
    raise KeyboardInterrupt(f"signal {signum}")


def _remove(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _say(message: str) -> None:
    print(f"[overhead] {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
