"""`python -m bench locomo-ablation`: what each memory layer and recall choice is worth, on
every shape of conversation side by side.

    python -m bench locomo-ablation --out bench/results/memory-ablation.json
        [--data PATH[@B1,B2] ...] [--budgets 2000] [--mode stateful] [--steps a0_hybrid,...]
        [--reuse DIR]

Runs `bench locomo` once per step below and data file (one client mode, every conversation of
the file, the file's budgets), each step adding one thing to the one before, and writes
FILE.json and FILE.md: the gateway's strict evidence recall and answer containment per step
for every (file, budget) side by side, beside the plain `hybrid` baseline of the same runs,
then per (file, budget) the figures per category. Without `--data`: the three shapes of
bench/locomo/shapes.py (LoCoMo dev at 2,000 tokens, MemoryBank-en and -zh at 500 and 1,000).
Each run's own result files go beside FILE as FILE-<file stem>-<step>.json, steps outermost (an
interrupted run has whole steps); `--reuse DIR` builds the tables from such files already in DIR
(named like that, FILE's stem included) instead of running them again, and runs only those
missing; each step records the overrides its run really had (`run_overrides`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from bench.locomo import cli
from bench.locomo.shapes import Shape, budget_list, column, shapes

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
    parser.add_argument("--data", action="append", default=[], metavar="PATH[@B1,B2]",
                        help="a LoCoMo-schema file and its budgets (repeatable; default: the "
                             "three shapes at their budgets)")
    parser.add_argument("--budgets", type=budget_list, default=None,
                        help="budgets of a --data file given without its own (default 2000)")
    parser.add_argument("--mode", default="stateful")
    parser.add_argument("--steps", type=lambda v: [x.strip() for x in v.split(",") if x.strip()],
                        default=None, help="only these steps, comma-separated (default: all)")
    parser.add_argument("--reuse", type=Path, default=None, metavar="DIR")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    names = [name for name, _, _ in STEPS]
    if args.steps and (unknown := set(args.steps) - set(names)):
        parser.error(f"unknown steps {sorted(unknown)}; choose from {', '.join(names)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    chosen = shapes(args.data, args.budgets)
    rows = []
    for name, label, overrides in STEPS:
        if args.steps and name not in args.steps:
            continue
        for shape in chosen:
            file = f"{args.out.stem}-{shape.key}-{name}.json"
            path = args.out.with_name(file)
            if args.reuse is not None and (args.reuse / file).exists():
                path = args.reuse / file
            elif not path.exists() or args.reuse is None:
                code = cli.main(["--data", str(shape.path),
                                 "--budgets", ",".join(map(str, shape.budgets)),
                                 "--modes", args.mode, "--out", str(path),
                                 *(a for o in overrides for a in ("--set", o))])
                if code:
                    return code
            result = json.loads(path.read_text("utf-8"))
            rows += [summary(name, label, overrides, result, budget, args.mode, shape)
                     for budget in shape.budgets]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"mode": args.mode, "data": [s.spec() for s in chosen],
                                    "steps": rows}, indent=1) + "\n", encoding="utf-8")
    text = markdown(rows, args.mode)
    args.out.with_suffix(".md").write_text(text, encoding="utf-8")
    print(text)
    return 0


def summary(name: str, label: str, overrides: Sequence[str], result: dict[str, Any],
            budget: int, mode: str, shape: Shape) -> dict[str, Any]:
    """One step on one (file, budget): the gateway's and hybrid's figures of its run, and the
    run's meta."""
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
    return {"step": name, "label": label, "data": shape.name, "budget": budget,
            "column": column(shape, budget), "overrides": list(overrides),
            "run_overrides": meta["config"].get("overrides"),
            "gateway": figures("gateway", mode), "hybrid": figures("hybrid", None),
            "fail_open_probes_scored": meta["counts"].get("fail_open_probes_scored"),
            "machine": meta["machine"], "started": meta["started"],
            "duration_s": meta["duration_s"]}


def markdown(rows: Sequence[dict[str, Any]], mode: str) -> str:
    """The steps side by side over every (file, budget), then each (file, budget) per
    category."""
    columns = list(dict.fromkeys(r["column"] for r in rows))
    steps = list(dict.fromkeys(r["step"] for r in rows))
    by = {(r["step"], r["column"]): r for r in rows}
    labels = {r["step"]: r["label"] for r in rows}
    lines = [f"# What each memory layer is worth ({mode} client)", "",
             "Strict rules of bench-data/REFERENCE.md (verbatim evidence turns over categories "
             "1–5, whole answers over categories 1–4). Each step adds one thing to the step "
             "above it; `hybrid` is the plain baseline of the same runs. Evidence recall / "
             "answer containment:" + _skipped(steps), "",
             "| step | " + " | ".join(columns) + " |",
             "|---|" + "---:|" * len(columns)]

    def cell(figures: dict[str, Any] | None) -> str:
        if figures is None:
            return "–"
        answer = figures["answer_containment"]
        return (f"{figures['evidence_recall']:.3f} / "
                + ("–" if answer is None else f"{answer:.3f}"))

    for step in steps:
        lines.append(f"| {labels[step]} | " + " | ".join(
            cell(by[(step, c)]["gateway"] if (step, c) in by else None) for c in columns)
            + " |")
    lines.append("| hybrid (the first step's runs) | " + " | ".join(
        cell(next((r["hybrid"] for r in rows if r["column"] == c), None)) for c in columns)
        + " |")
    for c in columns:
        lines += ["", f"## {c}", "",
                  "| step | evidence recall | 1 multi-hop | 2 temporal | 3 open-domain | "
                  "4 single-hop | 5 adversarial | answer containment | hybrid (same run) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in (r for r in rows if r["column"] == c):
            g, h = r["gateway"], r["hybrid"]
            cats = " | ".join(f"{g[f'evidence_recall_{k}']:.3f}"
                              if g.get(f"evidence_recall_{k}") is not None else "–"
                              for k in CATEGORIES)
            lines.append(f"| {r['label']} | {g['evidence_recall']:.3f} | {cats} | "
                         f"{_figure(g['answer_containment'])} | {h['evidence_recall']:.3f} / "
                         f"{_figure(h['answer_containment'])} |")
    machine = rows[0]["machine"] if rows else {}
    runs = {(r["step"], r["data"]): (r["fail_open_probes_scored"] or 0, r["duration_s"])
            for r in rows}  # one run per step and file, whatever its budgets
    lines += ["", f"Machine: {machine.get('cores')} cores, {machine.get('cpu_model')}, Python "
              f"{machine.get('python')}. Probes answered without memory (fail open): "
              f"{sum(runs[k][0] for k in runs)}. Run time: {sum(runs[k][1] for k in runs):.0f} s "
              "(the steps' runs, summed).", ""]
    return "\n".join(lines)


def _skipped(steps: Sequence[str]) -> str:
    """A note when some steps were not run: a row then adds every step since the one above."""
    names = [name for name, _, _ in STEPS]
    places = [names.index(s) for s in steps if s in names]
    if not places or places == list(range(places[0], places[-1] + 1)):
        return ""
    missing = [names[i] for i in range(places[0], places[-1] + 1) if i not in places]
    return (f" (steps {', '.join(missing)} not run: a row adds every step between it and the "
            "row above)")


def _figure(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"
