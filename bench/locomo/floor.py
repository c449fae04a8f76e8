"""Calibrating recall's relevance floor offline (`python -m bench locomo-floor`): for each
question and each null probe (bench/locomo/null_probes.py) of the given LoCoMo-schema files,
recall as the simulation does (bench/locomo/simulate.py: the gateway's fusion, learned ranking
and successors over the same indexes), mark each recalled item's relevance as the gateway does
(`gateway.core.recall.relevance`: the dense similarity of the item or of the neighbour that
brought it; the lowest dense hit's when it was not a dense hit), and forward only the items at
or above each floor of a grid. Then leave one conversation out, over the files' conversations
pooled (a file named twice with two budgets counts as two data sets of the same
conversations, held out together): each fold picks, of the (floor, gate) points whose
evidence recall on the other conversations of each data set stays within `--tolerance` of no
floor, the one leaving the fewest null-probe tokens, and is scored on the held-out
conversation — its evidence recall and its null probes' recalled tokens, against no floor.

    python -m bench locomo-floor --data A.json,B.json [--budgets 2000,500] [--floors 0.1,0.2]
                                 [--gates 0.25] [--tolerance 0.005] [--out FILE.md]

The figures are the simulation's (stateless prompts, no summary chunks, the shipped ranking
weights): for choosing the floor, not for reporting; `python -m bench locomo` measures it in
the real gateway.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from bench.locomo.meter import PromptMeter
from bench.locomo.null_probes import null_probes, recalled_tokens
from bench.locomo.simulate import Corpus, Knobs, build_corpus, prompt, recall
from bench.locomo.vector_cache import VectorCache
from bench.locomo.data import load
from bench.machine import machine
from gateway.core.recall.need import Need, memory_need
from gateway.core.recall.recollection import Recollection
from gateway.core.recall.relevance import above_floor

FLOORS = (0.0, 0.1, 0.14, 0.16, 0.18, 0.2, 0.22, 0.25)
GATES = (0.0, 0.25, 0.3, 0.35)
Point = tuple[float, float]
"""(floor, gate): items below the floor are dropped; every item, when none reaches the gate."""


@dataclass(slots=True)
class Fold:
    """One conversation's figures per floor."""

    name: str
    data: str
    evidence: dict[Point, list[float]] = field(default_factory=dict)
    null_tokens: dict[Point, list[int]] = field(default_factory=dict)


def relevant(corpus: Corpus, query: str, knobs: Knobs) -> list[Recollection]:
    """`simulate.recall` with each item's relevance as the recaller marks it, none dropped by
    a floor or gate (a message that needs no memory recalls nothing, as in the gateway:
    gateway/core/recall/need.py)."""
    return recall(corpus, query, replace(knobs, relevance_floor=-1, relevance_gate=-1))


def kept(items: Sequence[Recollection], point: Point,
         need: Need = Need.OPEN) -> tuple[Recollection, ...]:
    """What the gateway forwards of `items` at `point` for a message asking `need`."""
    floor, gate = point
    return above_floor(items, floor, gate, need)


def measure(corpus: Corpus, data: str, budget: int, floors: Sequence[Point], knobs: Knobs,
            meter: PromptMeter) -> Fold:
    fold = Fold(corpus.conversation.sample_id, data)
    for q in corpus.conversation.questions:
        items = relevant(corpus, q.question, knobs)
        need = memory_need(q.question)
        cache: dict[tuple[str, ...], float | None] = {}
        for floor in floors:
            forwarded = kept(items, floor, need)
            key = tuple(r.id for r in forwarded)
            if key not in cache:
                score = corpus.scorer.score(q, prompt(corpus, q.question, forwarded, budget))
                cache[key] = score.evidence_recall
            if cache[key] is not None:
                fold.evidence.setdefault(floor, []).append(float(cache[key]))  # type: ignore
    for probe in null_probes([str(m.content) for m in corpus.messages]):
        items = relevant(corpus, probe, knobs)
        need = memory_need(probe)
        for floor in floors:
            fold.null_tokens.setdefault(floor, []).append(
                recalled_tokens(meter, prompt(corpus, probe, kept(items, floor, need), budget)))
    return fold


def leave_one_out(folds: Sequence[Fold], points: Sequence[Point], tolerance: float
                  ) -> list[tuple[str, Point, float, float, float, float]]:
    """Per held-out conversation: (name, point picked on the others, its evidence recall with
    no floor and with the point, its null probes' recalled tokens with no floor and with it).
    The pick: of the points whose evidence recall on the other conversations of each data set
    stays within `tolerance` of no floor, the one leaving the fewest null-probe tokens (mean
    over the data sets of the share of no floor's)."""
    none = points[0]
    out = []
    for held in folds:
        rest = [f for f in folds if f.name != held.name]  # at every budget
        sets = sorted({f.data for f in rest})

        def mean(point: Point, data: str, what: str) -> float:
            return statistics.fmean(v for f in rest if f.data == data
                                    for v in getattr(f, what).get(point, []))

        def allowed(point: Point) -> bool:
            return all(mean(point, d, "evidence") >= mean(none, d, "evidence") - tolerance
                       for d in sets)

        def share(point: Point) -> float:
            return statistics.fmean(mean(point, d, "null_tokens") / mean(none, d, "null_tokens")
                                    for d in sets)

        picked = min((p for p in points if allowed(p)), key=lambda p: (share(p), p))
        out.append((held.name, picked,
                    statistics.fmean(held.evidence.get(none, [float("nan")])),
                    statistics.fmean(held.evidence.get(picked, [float("nan")])),
                    statistics.fmean(held.null_tokens[none]),
                    statistics.fmean(held.null_tokens[picked])))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench locomo-floor", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="LoCoMo-schema files, comma-separated")
    parser.add_argument("--budgets", default="2000",
                        help="one budget per file, comma-separated (or one for all)")
    parser.add_argument("--floors", default=",".join(map(str, FLOORS)))
    parser.add_argument("--gates", default=",".join(map(str, GATES)),
                        help="no item is forwarded when none reaches the gate")
    parser.add_argument("--tolerance", type=float, default=0.002,
                        help="evidence recall a floor may lose on the training conversations")
    parser.add_argument("--cache", default=None)
    parser.add_argument("--out", default=None, help="also write the output to FILE.md")
    args = parser.parse_args(argv)
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    from gateway.memory.embedders.use import UseEmbedder
    import tempfile
    cache = VectorCache(Path(args.cache or Path(tempfile.gettempdir()) / "locomo-sim"),
                        UseEmbedder())
    files = args.data.split(",")
    budgets = [int(b) for b in args.budgets.split(",")]
    budgets = budgets * len(files) if len(budgets) == 1 else budgets
    floors = sorted(float(f) for f in args.floors.split(","))
    gates = sorted(float(g) for g in args.gates.split(","))
    points = [(f, g) for g in gates for f in floors if f <= g or g == gates[0]]
    knobs, meter = Knobs(), PromptMeter()
    folds: list[Fold] = []
    for path, budget in zip(files, budgets):
        for conversation in load(path):
            corpus = build_corpus(conversation, cache)
            probes = null_probes([str(m.content) for m in corpus.messages])
            corpus.query_vectors.update(zip(probes, cache.embed(list(probes))))
            fold = measure(corpus, f"{Path(path).stem}@{budget}", budget, points, knobs,
                           meter)
            fold.name = f"{Path(path).stem}/{conversation.sample_id}"
            folds.append(fold)
            say(f"{fold.data} {fold.name}: " + " ".join(
                f"{f:g}/{g:g}:{statistics.fmean(fold.evidence[(f, g)]):.3f}/"
                f"{statistics.fmean(fold.null_tokens[(f, g)]):.0f}" for f, g in points))
    cache.save()
    for data in sorted({f.data for f in folds}):
        for point in points:
            evidence = [v for f in folds if f.data == data for v in f.evidence[point]]
            tokens = [v for f in folds if f.data == data for v in f.null_tokens[point]]
            say(f"{data} floor {point[0]:g} gate {point[1]:g}: evidence "
                  f"{statistics.fmean(evidence):.4f}, null-probe recalled tokens "
                  f"{statistics.fmean(tokens):.0f}")
    rows = leave_one_out(folds, points, args.tolerance)
    for (name, picked, before, after, t0, t1), fold in zip(rows, folds):
        say(f"  held out {fold.data} {name}: floor/gate {picked} (picked on the others), evidence "
              f"{before:.3f} -> {after:.3f}, null-probe tokens {t0:.0f} -> {t1:.0f}")
    for data in sorted({f.data for f in folds}):
        mine = [(r, len(f.evidence[points[0]])) for r, f in zip(rows, folds) if f.data == data]
        weights = [w for _, w in mine]
        say(f"held out, {data}: evidence "
              f"{np.average([r[2] for r, _ in mine], weights=weights):.4f} -> "
              f"{np.average([r[3] for r, _ in mine], weights=weights):.4f}, null-probe tokens "
              f"{statistics.fmean(r[4] for r, _ in mine):.0f} -> "
              f"{statistics.fmean(r[5] for r, _ in mine):.0f}; picked "
              f"{sorted({r[1] for r, _ in mine})}")
    if args.out:
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        Path(args.out).write_text(
            "# Recall's relevance floor and gate, calibrated offline\n\n"
            f"`python -m bench locomo-floor {' '.join(argv if argv is not None else sys.argv[1:])}`"
            f"\n\nMachine: {json.dumps(machine())}; written {started}. Each line: floor/gate: "
            "evidence recall / null-probe recalled tokens (mean per probe).\n\n```\n"
            + "\n".join(lines) + "\n```\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
