"""`python -m bench locomo`: run the benchmark and write FILE.json, FILE.md and FILE.png.

    python -m bench locomo [--data PATH] [--conversations ID,...] [--limit N]
                           [--budgets 1000,2000,4000]
                           [--modes stateless,stateful,sessions,continued]
                           [--store URL] [--concurrency N] [--gateway-processes N]
                           [--dump-prompts FILE.jsonl] [--build replay|import]
                           --out FILE.json

The gateway runs in child processes (replicas; uvicorn on loopback ports, background
recorders) against one store: by default an embedded Valkey in a fresh temporary directory, removed
afterwards. `--dump-prompts` writes one JSON line per probe: `{conversation, qa, strategy,
mode, budget, messages}` (the messages forwarded upstream). Progress goes to stderr; the
markdown report is printed at the end. LongMemEval's file (`longmemeval-dev.json`: questions
with a type and a date) runs at budgets 8,000 and 16,000 unless `--budgets` names others, its
histories brought in through the import endpoint unless `--build replay` (the same scores,
bench/results/longmemeval-import-vs-replay.md), and is reported by question type too.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import yaml

import gateway
from bench.locomo import report
from bench.dialects import DIALECTS
from bench.machine import machine
from bench.locomo.data import Conversation, chain, file_sha256, load
from bench.locomo.dump import PromptDump
from bench.locomo.replay import (BUILDS, DEFAULT_MODES, MODES, Outcome, Replayer,
                                 gateway_config)
from bench.locomo.results import rows
from bench.locomo.retrieval import RRF_K
from bench.locomo.server import gateway_processes
from bench.overhead.processes import stop_children_on_sigterm
from gateway.store.embedded import EmbeddedRedis

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO.parent / "shared" / "bench-data" / "locomo-dev.json"


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench locomo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help="a LoCoMo-schema JSON file (default: %(default)s)")
    parser.add_argument("--conversations", type=_csv, default=None,
                        help="sample ids to run, comma-separated (default: all)")
    parser.add_argument("--limit", type=int, default=None,
                        help="at most N questions per conversation")
    parser.add_argument("--budgets", type=lambda v: [int(b) for b in _csv(v)],
                        default=None, help="prompt budgets in tokens (default: 1000,2000,4000;"
                                           " LongMemEval's file: 8000,16000)")
    parser.add_argument("--modes", type=_csv, default=list(DEFAULT_MODES),
                        help=f"client modes: {','.join(MODES)} "
                             f"(default: {','.join(DEFAULT_MODES)})")
    parser.add_argument("--store", default=None,
                        help="redis:// or unix:// URL (default: embedded Valkey in a temp dir)")
    parser.add_argument("--concurrency", type=int, default=24,
                        help="probe requests in flight (default: %(default)s)")
    parser.add_argument("--gateway-processes", type=int, default=2,
                        help="gateway replicas over one store, each in its own process "
                             "(default: %(default)s — one per core: on a quiet 2-core machine "
                             "the whole dev split takes 574 s with 2, 651 s with 1)")
    parser.add_argument("--dump-prompts", type=Path, default=None, metavar="FILE.jsonl",
                        help="write every probe's forwarded messages, one JSON line each")
    parser.add_argument("--set", dest="overrides", type=parse_override, action="append",
                        default=[], metavar="KEY=VALUE",
                        help="a gateway setting for this run (repeatable), in every bench "
                             "tenant (context.summary_share=0.1, memory.facts_k=0) or, with "
                             "a leading `config.`, in the whole config "
                             "(config.memory.index.stemming=false); VALUE is YAML")
    parser.add_argument("--ranker", choices=("held-out", "shipped"), default="held-out",
                        help="the learned ranking's weights for each conversation: trained "
                             "on the file's other conversations (held-out, the default: no "
                             "conversation is scored by weights fitted to it), or those the "
                             "gateway ships (trained on the dev split)")
    parser.add_argument("--dialect", choices=DIALECTS, default="chat",
                        help="the door every request goes through, in its wire form: chat "
                             "completions (default), Anthropic Messages or Responses — the "
                             "same conversations, so the scores should not move")
    parser.add_argument("--chain", type=int, default=0, metavar="K",
                        help="replay the (selected) conversations chained into one user's long "
                             "history, K times over (LoCoMo dev once: ~90k tokens), with the "
                             "last pass's questions: the cost benchmark's long rows "
                             "(data.chain); the learned ranking is then the shipped one")
    parser.add_argument("--settle", action="store_true",
                        help="after each replayed request, wait until memory has caught up "
                             "(as `gateway bench cost` does): without it a lagging memory "
                             "worker recalls less and over-budget prompts look cheaper")
    parser.add_argument("--build", choices=BUILDS, default=None,
                        help="how the histories reach the gateway: replayed request by request "
                             "(default), or each brought in by one request to the import "
                             "endpoint (default for LongMemEval's file; no gateway cost "
                             "figures then: there are no replay requests)")
    parser.add_argument("--drain-timeout", type=float, default=600.0, metavar="SECONDS",
                        help="how long the recorder and memory worker may take after the "
                             "histories are in (default: %(default)s; an import leaves all of "
                             "it to after)")
    parser.add_argument("--vector-cache", type=Path, default=None, metavar="DIR",
                        help="read the turns' vectors from this cache and add what it lacks "
                             "(the gateway under test and the plain retrieval both; "
                             "bench/locomo/vector_cache.py): a rerun embeds nothing again "
                             "(default: none, everything embedded)")
    parser.add_argument("--out", type=Path, required=True, help="result file (.json)")
    args = parser.parse_args(argv)
    if bad := set(args.modes) - set(MODES):
        parser.error(f"unknown modes {sorted(bad)}; choose from {', '.join(MODES)}")
    if args.concurrency < 1 or args.gateway_processes < 1:
        parser.error("concurrency and gateway processes must be at least 1")
    if args.budgets is not None and (not args.budgets or min(args.budgets) <= 0):
        parser.error("budgets must be positive integers")
    return args


def versions() -> dict[str, str]:
    out = {"gateway": gateway.__version__}
    for name in ("litellm", "tiktoken"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def parse_override(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), yaml.safe_load(value)


def _progress(text: str) -> None:
    print(f"[locomo] {text}", file=sys.stderr, flush=True)


def run(conversations: Sequence[Conversation], *, budgets: Sequence[int], modes: Sequence[str],
        limit: int | None, store: str | None, concurrency: int, processes: int,
        dump: PromptDump | None, overrides: Sequence[tuple[str, Any]] = (),
        folds: dict[str, dict[str, float]] | None = None,
        dialect: str = "chat",
        contexts: dict[int, dict[str, Any]] | None = None,
        baselines: bool = True, drain_timeout: float = 600.0,
        settle: bool = False, build: str = "replay",
        system_prompt: str = "", vector_cache: Path | None = None) -> list[Outcome]:
    """Start the store (unless given) and the gateway, replay and probe every conversation.
    `folds`: per conversation, the learned ranking's weights its tenants use; `contexts`: per
    budget, its tenant's `context` section (`gateway_config`); `baselines`: compute the
    baseline strategies too; `drain_timeout`: how long the memory worker may take after the
    replay; `settle`, `build`, `system_prompt`: `Replayer`'s; `vector_cache`: the cache the
    gateway and the plain retrieval read vectors from (bench/locomo/vector_cache.py)."""
    tmp = embedded = None
    if store is None:
        tmp = tempfile.mkdtemp(prefix="cgbench-")  # short: a unix socket path must fit
        embedded = EmbeddedRedis(tmp)
        embedded.start()
        store = embedded.url
    fail_open_log = os.path.join(tmp or tempfile.gettempdir(),
                                 f"cgbench-fail-open-{os.getpid()}.log")
    data_dir = tempfile.mkdtemp(prefix="cgbench-data-")
    try:
        config = gateway_config(store, budgets, overrides, data_dir, folds, contexts)
        with gateway_processes(config, processes, fail_open_log, vector_cache) as urls:
            _progress(f"gateway serving at {', '.join(urls)} (child processes)")
            replayer = Replayer(urls, store, budgets, modes, progress=_progress, dump=dump,
                                concurrency=concurrency, fail_open_log=fail_open_log,
                                folds=folds is not None, dialect=dialect,
                                baselines=baselines, drain_timeout=drain_timeout,
                                settle=settle, build=build, system_prompt=system_prompt,
                                vector_cache=vector_cache)
            return asyncio.run(replayer.run(conversations, limit))
    finally:
        if tmp is None and os.path.exists(fail_open_log):
            os.remove(fail_open_log)
        if embedded is not None:
            embedded.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    stop_children_on_sigterm()
    args = parse_args(sys.argv[1:] if argv is None else argv)
    started, clock = datetime.datetime.now(datetime.timezone.utc), time.perf_counter()
    conversations = load(args.data)
    if args.conversations:
        unknown = set(args.conversations) - {c.sample_id for c in conversations}
        if unknown:
            _progress(f"unknown conversations: {', '.join(sorted(unknown))}")
            return 2
        conversations = [c for c in conversations if c.sample_id in args.conversations]
    _progress(f"{len(conversations)} conversations from {args.data}")
    typed = any(q.question_type for c in conversations for q in c.questions)
    if args.budgets is None:
        args.budgets = [8000, 16000] if typed else [1000, 2000, 4000]
    if args.build is None:
        args.build = "import" if typed else "replay"
    if args.chain > 0:
        conversations = [chain(conversations, args.chain)]
        _progress(f"chained {args.chain} time(s) into {conversations[0].sample_id}: "
                  f"{sum(len(s.turns) for s in conversations[0].sessions)} turns")
    folds = None
    if args.ranker == "held-out":
        from bench.locomo.ranker import fold_weights
        _progress("training the learned ranking without each conversation in turn")
        # The folds are trained on features of the same BM25 terms the gateway will use.
        segment = dict(args.overrides or ()).get("config.memory.index.segmentation", True)
        trained = fold_weights(args.data, segment=bool(segment))
        if all(c.sample_id in trained for c in conversations):
            folds = {c.sample_id: trained[c.sample_id] for c in conversations}
        else:  # a file of one conversation: nothing else to train on
            _progress("no other conversation to train on: the shipped ranking's weights")
    if args.dump_prompts is not None:
        args.dump_prompts.parent.mkdir(parents=True, exist_ok=True)
        with open(args.dump_prompts, "w", encoding="utf-8") as file:
            outcomes = run(conversations, budgets=args.budgets, modes=args.modes,
                           limit=args.limit, store=args.store, concurrency=args.concurrency,
                           processes=args.gateway_processes,
                           dump=PromptDump(file), overrides=args.overrides, folds=folds,
                           dialect=args.dialect, settle=args.settle, build=args.build,
                           drain_timeout=args.drain_timeout, vector_cache=args.vector_cache)
    else:
        outcomes = run(conversations, budgets=args.budgets, modes=args.modes, limit=args.limit,
                       store=args.store, concurrency=args.concurrency,
                       processes=args.gateway_processes, dump=None, overrides=args.overrides,
                       folds=folds, dialect=args.dialect, settle=args.settle,
                       build=args.build, drain_timeout=args.drain_timeout,
                       vector_cache=args.vector_cache)
    questions = [q for c in conversations
                 for q in (c.questions[:args.limit] if args.limit is not None else c.questions)]
    meta = {
        "machine": machine(),
        "versions": versions(),
        "config": {"budgets": args.budgets, "modes": args.modes, "dialect": args.dialect,
                   "chain": args.chain, "settle": args.settle, "build": args.build,
                   "data": str(args.data),
                   "data_sha256": file_sha256(args.data),
                   "conversations": [c.sample_id for c in conversations], "limit": args.limit,
                   "reserve_completion_tokens": 1000, "last_n_messages": 20,
                   "gateway_context": "gateway defaults besides the budget",
                   "overrides": {k: v for k, v in args.overrides},
                   "ranker": "held-out" if folds is not None else "shipped",
                   "ranker_folds": folds,
                   "retrieval_baselines": f"bm25s over gateway.core.text.lexical tokens; USE "
                                          f"multilingual v3; hybrid = RRF k={RRF_K}",
                   "concurrency": args.concurrency,
                   "gateway_processes": args.gateway_processes,
                   "vector_cache": None if args.vector_cache is None
                   else str(args.vector_cache),
                   "dump_prompts": None if args.dump_prompts is None
                   else str(args.dump_prompts)},
        "started": started.isoformat(timespec="seconds"),
        "duration_s": round(time.perf_counter() - clock, 1),
        "counts": {
            "questions": len(questions),
            "with_evidence": sum(1 for q in questions if q.evidence),
            "unresolved_evidence_refs": sum(q.unresolved for q in questions),
            "answer_eligible": sum(len(o.eligible) for o in outcomes),
            "answer_eligible_parts": sum(len(o.eligible_parts) for o in outcomes),
            "gateway_requests": sum(o.requests for o in outcomes),
            "mode_mismatches_by_budget": {
                str(b): sum(o.mode_mismatches.get(b, 0) for o in outcomes) for b in args.budgets},
            "token_header_mismatches": sum(o.header_mismatches for o in outcomes),
            "fail_open_replay_requests": sum(o.fail_open_replay for o in outcomes),
            "fail_open_probes_retried": sum(o.fail_open_retried for o in outcomes),
            "fail_open_probes_scored": sum(o.fail_open_scored for o in outcomes),
        },
        "counts_note": "REFERENCE.md counts 755 questions with evidence and 236 eligible "
                       "answers on the dev split; this harness finds 755 and 237: its history "
                       "is the client's rendering (photo captions included, "
                       "`[shares a photo: ...]`), where one more answer occurs verbatim "
                       "(without captions: 228).",
    }
    results = rows(outcomes)
    out = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "results": results}, indent=1, ensure_ascii=False)
                   + "\n", encoding="utf-8")
    text = report.markdown(results, meta)
    out.with_suffix(".md").write_text(text, encoding="utf-8")
    report.plot(results, out.with_suffix(".png"))
    _progress(f"wrote {out}, {out.with_suffix('.md')}, {out.with_suffix('.png')} "
              f"in {meta['duration_s']} s")
    print(text)
    return 0
