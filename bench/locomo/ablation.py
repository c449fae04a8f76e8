"""`python -m bench locomo-ablation`: what each memory layer and recall choice is worth.

    python -m bench locomo-ablation --out bench/results/memory-ablation.json
        [--budget 2000] [--mode stateful] [--reuse DIR]

Runs `bench locomo` once per step below (one budget, one client mode, every dev
conversation), each step adding one thing to the one before, and writes FILE.json and
FILE.md: the gateway's strict evidence recall (overall and per category) and answer
containment per step, beside the plain `hybrid` baseline of the same runs. Each step's own
result files go beside FILE as FILE-<step>.json; `--reuse DIR` builds the table from step
files already in DIR (named <step>.json) instead of running them again; each step records
the overrides its run really had (`run_overrides`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from bench.locomo import cli

FUSION = "memory.recall_ranking=fusion"
CHUNKS = "memory.recall_chunks=true"
STEPS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("a0_hybrid", "gateway, hybrid recall only (BM25 + USE, RRF k=60, whole turns)",
     ("config.memory.index.stemming=false", "config.memory.index.context_vectors=false",
      "memory.recall_successors=false", "memory.recall_rrf_k=60", FUSION, "memory.facts_k=0",
      "context.profile_share=0")),
    ("a1_stem", "+ English stemming in BM25",
     ("config.memory.index.context_vectors=false", "memory.recall_successors=false",
      "memory.recall_rrf_k=60", FUSION, "memory.facts_k=0", "context.profile_share=0")),
    ("a2_ctx", "+ turns embedded after the turn before them",
     ("memory.recall_successors=false", "memory.recall_rrf_k=60", FUSION, "memory.facts_k=0",
      "context.profile_share=0")),
    ("a3_succ", "+ each recalled turn brings the next",
     ("memory.recall_rrf_k=60", FUSION, "memory.facts_k=0", "context.profile_share=0")),
    ("a4_k20", "+ RRF k=20", (FUSION, "memory.facts_k=0", "context.profile_share=0")),
    ("a5_ranker", "+ learned ranking, held out",
     ("memory.facts_k=0", "context.profile_share=0")),
    ("a6_profile", "+ profile (5 % share) (= the defaults)", ("memory.facts_k=0",)),
    ("a7_facts", "+ 6 facts per request", ("memory.facts_k=6",)),
    ("a8_chunks", "+ summary chunks recalled", ("memory.facts_k=6", CHUNKS)),
    ("a9_summary", "+ summaries (10 % share)",
     ("memory.facts_k=6", CHUNKS, "context.summary_share=0.1", "context.recall_share=0.85")),
)
CATEGORIES = ("1", "2", "3", "4", "5")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench locomo-ablation", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=int, default=2000)
    parser.add_argument("--mode", default="stateful")
    parser.add_argument("--reuse", type=Path, default=None, metavar="DIR")
    parser.add_argument("--out", type=Path, required=True)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    steps = []
    for name, label, overrides in STEPS:
        path = (args.reuse / f"{name}.json" if args.reuse is not None
                else args.out.with_name(f"{args.out.stem}-{name}.json"))
        if args.reuse is None:
            code = cli.main(["--budgets", str(args.budget), "--modes", args.mode,
                             "--out", str(path), *(a for o in overrides for a in ("--set", o))])
            if code:
                return code
        steps.append(summary(name, label, overrides, json.loads(path.read_text("utf-8")),
                             args.budget, args.mode))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"budget": args.budget, "mode": args.mode, "steps": steps},
                                   indent=1) + "\n", encoding="utf-8")
    text = markdown(steps, args.budget, args.mode)
    args.out.with_suffix(".md").write_text(text, encoding="utf-8")
    print(text)
    return 0


def summary(name: str, label: str, overrides: Sequence[str], result: dict[str, Any],
            budget: int, mode: str) -> dict[str, Any]:
    """One step: the gateway's and hybrid's figures of its run, and the run's meta."""
    def figures(strategy: str, row_mode: str | None) -> dict[str, Any]:
        rows = {r["category"]: r for r in result["results"] if r["strategy"] == strategy
                and r["mode"] == row_mode and r["budget"] in (budget, None)}
        out = {"evidence_recall": rows["all"]["evidence_recall"],
               "answer_containment": rows["all"]["answer_containment"],
               "forwarded_tokens_mean": rows["all"]["forwarded_tokens_mean"]}
        out.update({f"evidence_recall_{c}": rows[c]["evidence_recall"]
                    for c in CATEGORIES if c in rows})
        return out
    meta = result["meta"]
    return {"step": name, "label": label, "overrides": list(overrides),
            "run_overrides": meta["config"].get("overrides"),
            "gateway": figures("gateway", mode), "hybrid": figures("hybrid", None),
            "fail_open_probes_scored": meta["counts"].get("fail_open_probes_scored"),
            "machine": meta["machine"], "started": meta["started"],
            "duration_s": meta["duration_s"]}


def markdown(steps: Sequence[dict[str, Any]], budget: int, mode: str) -> str:
    lines = [f"# What each memory layer is worth (LoCoMo dev, {budget} tokens, {mode} client)",
             "",
             "Strict rules of bench-data/REFERENCE.md (verbatim evidence turns over categories "
             "1–5, whole answers over categories 1–4). Each step adds one thing to the step "
             "above it; `hybrid` is the plain baseline of the same run.",
             "",
             "| step | evidence recall | 1 multi-hop | 2 temporal | 3 open-domain | "
             "4 single-hop | 5 adversarial | answer containment | hybrid (same run) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in steps:
        g, h = s["gateway"], s["hybrid"]
        cats = " | ".join(f"{g.get(f'evidence_recall_{c}', float('nan')):.3f}"
                          for c in CATEGORIES)
        lines.append(f"| {s['label']} | {g['evidence_recall']:.3f} | {cats} | "
                     f"{g['answer_containment']:.3f} | {h['evidence_recall']:.3f} / "
                     f"{h['answer_containment']:.3f} |")
    machine = steps[0]["machine"] if steps else {}
    lines += ["", f"Machine: {machine.get('cores')} cores, {machine.get('cpu_model')}, Python "
              f"{machine.get('python')}. Probes answered without memory (fail open): "
              f"{sum(s['fail_open_probes_scored'] or 0 for s in steps)}.", ""]
    return "\n".join(lines)
