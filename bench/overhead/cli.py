"""`python -m bench overhead`: the latency the gateway adds, like for like with LiteLLM's proxy.

Starts a fake upstream, the gateway (embedded store, to the fake as an OpenAI-compatible
provider) and LiteLLM's proxy (to the same fake) as child processes; stores a conversation of
each length in `--turns`; measures every target with the same request body — a stateless
client's whole history plus a new question — interleaved; writes FILE.json, FILE.md and
FILE.png; and stops every child it started, also on errors and Ctrl-C.

Targets: `direct` (the fake itself), `gateway-passthrough` (no conversation id),
`gateway-memory` (X-Conversation-Id of the stored conversation, persistence off; and a
persistence-on run at c=1), `litellm-proxy` (the same body) and `litellm-proxy-forwarded` (the
body the gateway forwarded for it). Rows: see bench.overhead.stats.Row; method: bench.overhead.run.

The default run (turns 50,300; c=1,10,100; streaming and not; 300 requests per target and cell;
100 persistence-on requests per length) is bounded by the slowest targets at 300 turns (LiteLLM's
proxy and today's gateway handle the ~190 kB, 601-message body at a few requests/s): estimated
from a reduced run's rates, ~10-15 minutes on 2 idle cores once the gateway meets its targets,
20-30 minutes with the gateway of issue 10's start. `--turns 50` or `--concurrency 1,10` cut it.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.machine import machine
from bench.overhead.goals import check, goals, ratio_goals
from bench.overhead.processes import STORE_PLACES, Pinning, stop_children_on_sigterm
from bench.overhead.report import table, targets_table, write_all
from bench.overhead.run import Plan, measure
from bench.overhead.stack import TARGETS, Stack, default_litellm, litellm_version, \
    source_info

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "results" / "overhead.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench overhead", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300,
                        help="measured requests per target and cell, at least 3 x concurrency "
                             "(default 300)")
    parser.add_argument("--concurrency", type=_ints, default=(1, 10, 100),
                        help="comma-separated levels (default 1,10,100)")
    parser.add_argument("--turns", type=_lengths, default=(50, 300),
                        help="comma-separated conversation lengths, each its own rows; 0 is a "
                             "request without history (default 50,300)")
    parser.add_argument("--history-turns", type=int, dest="history_turns",
                        help=argparse.SUPPRESS)  # the old single-length flag: --turns N
    parser.add_argument("--targets", type=_targets, default=TARGETS,
                        help=f"comma-separated subset of {','.join(TARGETS)} (default: all; "
                             "direct is always measured, added latency needs it)")
    parser.add_argument("--stream", choices=("both", "no", "yes"), default="both")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per cell")
    parser.add_argument("--warmup", type=int, default=20,
                        help="warm-up requests before each measurement (at least concurrency)")
    parser.add_argument("--workers", type=int, default=1,
                        help="worker processes of the gateway and of LiteLLM's proxy alike")
    parser.add_argument("--persist-requests", type=int, default=100,
                        help="requests of each persistence-on run, c=1, per length (0 skips)")
    parser.add_argument("--store-core", choices=STORE_PLACES, default="load",
                        help="where the gateway's embedded store runs: on the load core with "
                             "the generator and the fake (default), or on the server core")
    parser.add_argument("--litellm", default=default_litellm(),
                        help="LiteLLM's proxy command, from an install with the proxy extras "
                             "(default: $BENCH_LITELLM, else `litellm` beside this Python)")
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to cores")
    parser.add_argument("--keep-workdir", action="store_true",
                        help="keep the temp dir with configs and server logs")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"JSON output; .md and .png beside it (default {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    if args.history_turns is not None:
        args.turns = _lengths(str(args.history_turns))
    if "direct" not in args.targets:
        args.targets = ("direct", *args.targets)
    if args.requests < 1 or args.rounds < 1 or args.workers < 1:
        parser.error("--requests, --rounds and --workers must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop_children_on_sigterm()
    plan = Plan(targets=args.targets, concurrency=args.concurrency,
                streams={"both": (False, True), "no": (False,), "yes": (True,)}[args.stream],
                turns=args.turns, requests=args.requests, rounds=args.rounds,
                warmup=args.warmup, persist_requests=args.persist_requests)
    pinning = Pinning.detect(enabled=not args.no_pin, store=args.store_core)
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    started_at = dt.datetime.now(dt.timezone.utc)
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    stack = Stack(workdir=workdir, pinning=pinning, workers=args.workers,
                  litellm=args.litellm)
    _say(f"workdir {workdir}; gateway from {source_info()['path']}; pinning: "
         + (f"servers on core {pinning.server_core}, load + fake on core {pinning.load_core}, "
            f"store on core {pinning.store_core}" if pinning.used else "none"))
    try:
        pinning.pin_self()
        stack.start(plan.targets)
        placement = stack.placement()
        _say("servers ready: " + ", ".join(f"{s}" for s in (
            stack.fake_url, stack.gateway_url, stack.litellm_url) if s))
        outcome = asyncio.run(measure(stack, plan, _say))
    finally:
        stack.stop()
        if affinity is not None:
            os.sched_setaffinity(0, affinity)
        if not args.keep_workdir:
            _remove(workdir)
    meta = _meta(args, plan, pinning, started_at, time.monotonic() - started)
    meta.update(placement=placement, conversations=outcome.conversations,
                persist=outcome.persist, errors=outcome.errors)
    checked = check(goals(plan.turns) + ratio_goals(plan.turns), outcome.results)
    paths = write_all(args.out, meta, outcome.results, checked)
    print(table(outcome.results) + "\n\n" + targets_table(checked))
    _say(f"{meta['duration_s']:.0f} s; wrote " + ", ".join(str(p) for p in paths))
    if outcome.errors:
        _say(f"ERRORS in {len(outcome.errors)} measurement(s); see meta.errors")
        return 1
    return 0


METHOD = [
    "Every target is sent the same body: a stateless client's whole history (the N stored "
    "turns) plus a new question; the question varies over 8 variants sent in turn, so no "
    "cache keyed on the body serves a request from an earlier one. `gateway-memory` sends it "
    "with the X-Conversation-Id of a conversation whose N turns are stored and indexed (the "
    "recorder and the memory worker idle before measuring) and `X-Gateway-Persist: false`, so "
    "it stays at N turns. `gateway-passthrough` sends it without a conversation id. "
    "`litellm-proxy-forwarded` is LiteLLM's proxy sent the body the gateway forwarded for it "
    "(captured through the fake's `echo-messages` model, same conversation and budget).",
    "",
    "Latency is per request as the client sees it (non-streaming: until the whole body is "
    "read; streaming: the first body bytes). `added` = target pXX − direct pXX, same cell "
    "(stream × concurrency × turns), where direct was sent the body *this target's upstream "
    "receives* (`baseline`): the full body for passthrough and litellm-proxy, the forwarded "
    "body for gateway-memory and litellm-proxy-forwarded. The fake counts the prompt's tokens "
    "for `usage`, which costs it ~3 ms at 50 turns and ~10 ms at 300 (non-streaming): "
    "subtracting direct-with-the-full-body from gateway-memory would credit the gateway with "
    "upstream work it avoided by forwarding less. Both direct rows are listed.",
    "",
    "The targets of a cell ran interleaved in rounds (rotated order), each measurement after "
    "warm-up requests (at least one per concurrent slot) on fresh connections. A round has at "
    "least two requests per concurrent slot, so c=100 runs in one round of three waves: one "
    "request per slot would be a burst, not a closed loop at that concurrency. req/s is "
    "measured at that concurrency (a closed loop), not a saturation search. The load generator "
    "is aiohttp with pre-encoded bodies, one keep-alive connection per concurrent request.",
]


def _meta(args: argparse.Namespace, plan: Plan, pinning: Pinning, started_at: dt.datetime,
          duration_s: float) -> dict[str, Any]:
    return {
        "machine": machine(),
        "versions": {"gateway": _version("context-gateway"),
                     "litellm": _version("litellm"),
                     "litellm_proxy": litellm_version(args.litellm),
                     "aiohttp": _version("aiohttp")},
        "litellm_command": args.litellm,
        "source": source_info(),
        "workers": args.workers,
        "pinning": {"used": pinning.used, "server_core": pinning.server_core,
                    "load_core": pinning.load_core, "store_core": pinning.store_core,
                    "store": args.store_core if pinning.used else "unpinned"},
        "turns": list(plan.turns),
        "requests_per_cell": {str(c): plan.per_round(c) * plan.rounds_at(c)
                              for c in plan.concurrency},
        "rounds_per_cell": {str(c): plan.rounds_at(c) for c in plan.concurrency},
        "persist_requests": plan.persist_requests,
        "rounds": plan.rounds,
        "warmup": plan.warmup,
        "started": started_at.isoformat(timespec="seconds"),
        "duration_s": round(duration_s, 1),
        "method": METHOD,
    }


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


def _lengths(text: str) -> tuple[int, ...]:
    try:
        values = tuple(dict.fromkeys(int(v) for v in text.split(",") if v.strip()))
    except ValueError:
        values = ()
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError("expected conversation lengths >= 0, e.g. 50,300")
    return values


def _targets(text: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [n for n in names if n not in TARGETS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown target(s) {unknown}; choose from {TARGETS}")
    return tuple(t for t in TARGETS if t in names)  # canonical order


def _remove(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _say(message: str) -> None:
    print(f"[overhead] {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
