"""`gateway bench cost`: what a turn costs with the gateway, against the whole history sent
with the provider's prompt cache on — conversations replayed turn by turn as a stateless
client would, the LoCoMo-style probes asked at the end, every request billed under each
provider's caching rules at litellm's prices (issue 23).

    gateway bench cost [--data locomo-dev,memorybank-en,long-100k,long-300k,
                               user-5-conversations,user-5-continued]
                       [--windows 4000,8000,16000,32000]
                       [--assemblies whole,truncate,before,gateway]
                       [--system-prompt-tokens 0,1500,4000] [--brief-tokens 0,400]
                       [--bench-data DIR] [--dump-prompts FILE.jsonl] --out FILE.json

Writes FILE.json (`meta`, `rows`: bench/cost/rows.py), FILE.md (a table per data set) and
FILE-<rule>.png (a chart per price rule). `--dump-prompts` writes one JSON line per request and
probe: `{"data", "conversation", "thread", "turn", "assembly", "budget", "probe", "stable",
"messages"}` (`probe`: null for a replayed turn, the question's index, or "null" for a null
probe; `stable`: the gateway's `x-gateway-stable-messages`) — of every assembly but `whole`,
whose prompt is the client's history itself (bench/cost/client.py) and would make the file
gigabytes on the long histories. Data sets: bench/cost/data.py; assemblies: bench/cost/runs.py.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import sys
import time
from pathlib import Path
from typing import Sequence

from bench.cost.data import DATA_NAMES, DEFAULT_DATA, build, parse_names
from bench.cost.pricing import price_summary, priced_models
from bench.cost.report import markdown, plot, section
from bench.cost.rows import rows
from bench.cost.runs import ASSEMBLIES, cells, measure
from bench.locomo.cli import parse_override, versions
from bench.locomo.data import file_sha256
from bench.machine import machine
from bench.output import write_result
from bench.overhead.processes import stop_children_on_sigterm

REPO = Path(__file__).resolve().parents[2]


def _ints(value: str) -> tuple[int, ...]:
    return tuple(int(v) for v in value.split(",") if v.strip())


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gateway bench cost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=parse_names, default=DEFAULT_DATA,
                        help=f"data sets, of {', '.join(DATA_NAMES)} (default: "
                             f"{','.join(DEFAULT_DATA)})")
    parser.add_argument("--windows", type=_ints, default=(4000, 8000, 16000, 32000),
                        help="windows in tokens (default: 4000,8000,16000,32000)")
    parser.add_argument("--assemblies", default=ASSEMBLIES,
                        type=lambda v: tuple(a for a in ASSEMBLIES if a in v.split(",")),
                        help=f"of {','.join(ASSEMBLIES)} (default: all)")
    parser.add_argument("--bench-data", type=Path, default=REPO.parent / "shared" / "bench-data",
                        help="the folder of the LoCoMo-schema files (default: %(default)s)")
    parser.add_argument("--ranker", choices=("held-out", "shipped"), default="held-out",
                        help="learned-ranking weights trained without each conversation "
                             "(default; a chained history uses the shipped ones), or shipped")
    parser.add_argument("--concurrency", type=int, default=24)
    parser.add_argument("--gateway-processes", type=int, default=2)
    parser.add_argument("--drain-timeout", type=float, default=3600.0,
                        help="seconds the memory worker may take after a replay")
    parser.add_argument("--set", dest="overrides", type=parse_override, action="append",
                        default=[], metavar="KEY=VALUE",
                        help="a gateway setting for the served assemblies (repeatable), as "
                             "`bench locomo --set` (context.recall_share=0.4); VALUE is YAML")
    parser.add_argument("--system-prompt-tokens", type=_ints, default=(0,),
                        help="a client's own system prompt of each of these sizes, sent first "
                             "in every request of every assembly (bench/cost/system_prompt.py); "
                             "a run per size, each row says its `system_prompt_tokens` "
                             "(default: 0, none)")
    parser.add_argument("--brief-tokens", type=_ints, default=None,
                        help="the served assemblies' `memory.brief_tokens`, a run per value, "
                             "each row says its `brief_tokens` (default: as shipped)")
    parser.add_argument("--dump-prompts", type=Path, default=None, metavar="FILE.jsonl")
    parser.add_argument("--out", type=Path, required=True, help="result file (.json)")
    args = parser.parse_args(argv)
    if "whole" not in args.assemblies:
        parser.error("the `whole` assembly is every row's baseline: keep it")
    if not args.windows or min(args.windows) <= 1000:
        parser.error("windows must be more than the 1,000 tokens reserved for the completion")
    return args


def _progress(text: str) -> None:
    print(f"[cost] {text}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    stop_children_on_sigterm()
    args = parse_args(sys.argv[1:] if argv is None else argv)
    started, clock = datetime.datetime.now(datetime.timezone.utc), time.perf_counter()
    models = priced_models()
    grid = cells(args.assemblies, args.windows)
    measured, out_rows, files = [], [], {}
    seconds: dict[str, float] = {}
    with contextlib.ExitStack() as stack:
        dump = None
        if args.dump_prompts is not None:
            args.dump_prompts.parent.mkdir(parents=True, exist_ok=True)
            dump = stack.enter_context(open(args.dump_prompts, "w", encoding="utf-8"))
        for name in args.data:
            data = build(name, args.bench_data)
            files[name] = {"file": data.file.name, "sha256": file_sha256(data.file)}
            folds = None
            if args.ranker == "held-out" and data.held_out:
                from bench.locomo.ranker import fold_weights
                _progress(f"{name}: training the learned ranking without each conversation")
                trained = fold_weights(data.file)
                folds = {c.sample_id: trained[c.sample_id] for c in data.conversations}
            for system, brief in itertools.product(args.system_prompt_tokens,
                                                   args.brief_tokens or (None,)):
                result = measure(data, grid, folds=folds, overrides=args.overrides,
                                 drain_timeout=args.drain_timeout,
                                 concurrency=args.concurrency,
                                 processes=args.gateway_processes, dump=dump,
                                 progress=_progress, system_prompt_tokens=system,
                                 brief_tokens=brief)
                measured.append(result)
                out_rows += rows(result, models)
                label = section({"data": name, "system_prompt_tokens": system,
                                 "brief_tokens": brief})
                seconds[label] = result.seconds
                _progress(f"{label}: measured in {result.seconds} s")
    meta = {
        "command": "gateway bench cost " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": machine(), "versions": versions(),
        "started": started.isoformat(timespec="seconds"),
        "duration_s": round(time.perf_counter() - clock, 1),
        "seconds": seconds, "system_prompt_tokens": list(args.system_prompt_tokens),
        "brief_tokens": list(args.brief_tokens) if args.brief_tokens else None,
        "data": files, "windows": list(args.windows), "assemblies": list(args.assemblies),
        "ranker": args.ranker, "overrides": {k: v for k, v in args.overrides},
        "prices": [price_summary(m) for m in models],
    }
    text = markdown(out_rows, meta)
    write_result(args.out, {"meta": meta, "rows": out_rows}, text, indent=1)
    charts = plot(measured, out_rows, models, args.out.with_suffix(""))
    _progress(f"wrote {args.out}, {args.out.with_suffix('.md')} and "
              f"{', '.join(str(c) for c in charts)}")
    return 0
