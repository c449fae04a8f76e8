"""`python -m bench agent`: stateless agent sessions through a real gateway to the strict fake
upstream, measured at every step; writes FILE.json and FILE.md.

    python -m bench agent [--steps 40,70] [--windows 16000,default]
                          [--dialects anthropic,chat] [--stream] --out FILE.json

Each (window, dialect, steps) is one session (bench/agent/sessions.py) driven with the real
SDK (bench/agent/drive.py) through a gateway started at that window (bench/agent/stack.py).
Progress goes to stderr; the markdown report is printed at the end.
"""

from __future__ import annotations

import argparse
import datetime
import secrets
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from bench.agent.drive import ROW_FIELDS, Driver, Step
from bench.agent.report import first_errors, markdown, summary
from bench.agent.sessions import DIALECTS
from bench.agent.stack import running
from bench.machine import machine
from bench.output import write_result
from bench.overhead.processes import stop_children_on_sigterm
from bench.overhead.stack import source_info
from gateway.core.policy import ContextPolicy

DEFAULT = "default"


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _window(value: str) -> int | None:
    return None if value == DEFAULT else int(value)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench agent", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=lambda v: [int(s) for s in _csv(v)], default=[40, 70],
                        help="requests per session, one session each (default: 40,70)")
    parser.add_argument("--windows", type=lambda v: [_window(w) for w in _csv(v)],
                        default=[16000, None],
                        help="context.max_context_tokens per gateway, or `default` for the "
                             "shipped one (default: 16000,default)")
    parser.add_argument("--dialects", type=_csv, default=list(DIALECTS),
                        help=f"of {','.join(DIALECTS)} (default: both)")
    parser.add_argument("--stream", action="store_true", help="streaming requests")
    parser.add_argument("--label", default="agent sessions", help="the report's title")
    parser.add_argument("--out", type=Path, required=True, metavar="FILE.json")
    args = parser.parse_args(argv)
    unknown = set(args.dialects) - set(DIALECTS)
    if unknown:
        parser.error(f"unknown dialects {sorted(unknown)}; expected {','.join(DIALECTS)}")
    return args


def budget(window: int | None) -> int:
    """The forwarded prompt's ceiling at `window`: the window less the completion's reserve."""
    policy = ContextPolicy() if window is None else ContextPolicy(max_context_tokens=window)
    return policy.whole_prompt_budget


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    stop_children_on_sigterm()
    started = time.monotonic()
    runs: list[dict[str, Any]] = []
    for window in args.windows:
        with running(window) as endpoints:
            for dialect in args.dialects:
                for steps in args.steps:
                    runs.append(_session(dialect, endpoints[dialect], window, steps,
                                         args.stream))
    source = source_info()
    result = {"meta": {"label": args.label,
                       "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                           timespec="seconds"),
                       "commit": source["commit"],
                       "uncommitted_changes": source["uncommitted_changes"],
                       "command": "python -m bench agent " + shlex.join(argv),
                       "machine": machine(), "sessions": len(runs),
                       "seconds": time.monotonic() - started},
              "runs": runs}
    write_result(args.out, result, markdown(result), indent=None)
    return 0


def _session(dialect: str, endpoints: Any, window: int | None, steps: int,
             stream: bool) -> dict[str, Any]:
    name = f"agent-{dialect}-{window or DEFAULT}-{steps}-{secrets.token_hex(4)}"
    driver = Driver(dialect, endpoints, budget(window), stream=stream)

    def progress(step: Step) -> None:
        print(f"{name} step {step.step}: status {step.status}, forwarded "
              f"{step.forwarded_tokens} of {step.original_tokens}", file=sys.stderr)

    try:
        records = driver.run(name, steps, progress)
    finally:
        driver.close()
    return {"dialect": dialect, "window": window, "steps": steps, "stream": stream,
            "budget": budget(window), "conversation": name, "summary": summary(records),
            "errors": first_errors(records),
            "per_step": {"fields": list(ROW_FIELDS), "rows": [s.row() for s in records]}}
