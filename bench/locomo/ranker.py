"""Training the learned ranking of recall's candidates (`gateway.core.recall.ranking`) on
LoCoMo-schema files, and measuring it by leave-one-conversation-out.

    python -m bench locomo-ranker [--data FILE ...] [--budgets B1,B2] [--write]

By default it trains on the four dev sets together (`DEV_SETS`: LoCoMo's friends chatting in
English, MemoryBank's short user–assistant chats in English and in Chinese, LongMemEval's months
of user–assistant chat with long replies), so the weights see every shape of conversation and
both languages. MemoryBank holds the same users' chats in both languages: a conversation is left
out together with its translation (`person`), so no fold is scored by weights that saw the same
content in another language.

For every question with evidence, the candidates are those the gateway's recaller would fuse
(simulated: bench/locomo/simulate.py, at the ranking's search depth), each with the features
`gateway.core.recall.ranking.feature_rows` computes in the gateway; a candidate is positive when it
holds one of the question's evidence turns verbatim. The model is linear, trained with a
pairwise logistic loss (each positive against each negative of its question: what matters is
that evidence ranks above the rest, within the budget), features standardised, L2-regularised,
minimised by Newton's method — deterministic, no randomness.

Each data set weighs the same in the loss (within a set, each question the same): pooled by
question, LoCoMo's 757 would outvote MemoryBank's 100 a language (measured: bench/README.md,
"Learned ranking").

Leave-one-conversation-out: for each conversation, a ranker trained on the others (less its
person's other conversations) ranks its questions. Leave-one-data-set-out: each file is ranked
by a ranker trained on the other files only — how the weights do on a shape of conversation
they never saw, the figure that decides whether a feature or a weight generalises. Both are
reported next to plain fusion's, per budget (each file at its own budgets: `shapes.BUDGETS`).
`--write` then trains on every conversation and writes the weights the gateway ships
(gateway/core/recall/ranker_weights.py). Nothing of the data is written into the repository.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np

from bench.locomo.data import load
from bench.locomo.score import collapse
from bench.locomo.shapes import BUDGETS, budget_list
from bench.locomo.simulate import (DEFAULT_DATA, Corpus, Knobs, Result, build_corpus,
                                   candidates, report, simulate)
from bench.locomo.vector_cache import VectorCache
from gateway.core.recall.ranking import DEPTH, FEATURES, Ranker, feature_rows

L2 = 1e-2
NEWTON_STEPS = 50
"""At most; it stops once a step moves no weight by 1e-9 (~10 steps)."""
WEIGHTS_MODULE = (Path(__file__).resolve().parents[2] / "gateway" / "core" / "recall"
                  / "ranker_weights.py")
DEV_SETS = ("locomo-dev.json", "memorybank-en-dev.json", "memorybank-zh-dev.json",
            "longmemeval-dev.json")
"""The dev sets the shipped weights are trained on, all from one data folder."""

Examples = list[tuple[np.ndarray, np.ndarray]]
"""Per question: its candidates' feature rows, and which of them hold evidence (1.0)."""


def evidence_ids(corpus: Corpus, evidence: Sequence[str]) -> set[str]:
    """The ids of the entries holding the question's evidence turns verbatim."""
    turns = corpus.conversation.turns()
    collapsed = corpus.extra.setdefault("collapsed", [collapse(e.text) for e in corpus.entries])
    out = set()
    for dia_id in evidence:
        if dia_id not in turns:
            continue
        line = collapse(turns[dia_id].line)
        out.update(corpus.entries[i].id for i, text in enumerate(collapsed) if line in text)
    return out


def examples(corpus: Corpus, knobs: Knobs) -> Examples:
    out = []
    for q in corpus.conversation.questions:
        wanted = evidence_ids(corpus, q.evidence)
        if not wanted:
            continue
        found = candidates(corpus, q.question, knobs)
        labels = np.array([1.0 if c.id in wanted else 0.0 for c in found])
        if labels.any() and not labels.all():
            out.append((np.array(feature_rows(q.question, found)), labels))
    return out


def train(groups: Examples, *, l2: float = L2, iterations: int = NEWTON_STEPS,
          weights: Sequence[float] | None = None) -> Ranker:
    """A pairwise logistic ranker over `groups` (see the module docstring), the loss minimised
    by Newton's method: a handful of steps where gradient descent took 1,500 (a minute a fold
    once the three dev sets are pooled). `weights`: each question's weight (default: the
    same for every question)."""
    if not groups:
        raise ValueError("no question with evidence among the candidates to train on")
    rows = np.vstack([x for x, _ in groups])
    mean, scale = rows.mean(axis=0), rows.std(axis=0)
    scale[scale == 0] = 1.0
    pairs = []
    for x, y in groups:
        z = (x - mean) / scale
        positive, negative = z[y > 0], z[y == 0]
        pairs.append((positive[:, None, :] - negative[None, :, :]).reshape(-1, z.shape[1]))
    each = np.ones(len(pairs)) if weights is None else np.asarray(weights, dtype=float)
    each = each / each.sum()
    weight = np.concatenate([np.full(len(d), q / len(d)) for d, q in zip(pairs, each)])
    differences = np.vstack(pairs)
    w = np.zeros(len(FEATURES))
    for _ in range(iterations):
        # Loss: each question's mean of -log sigmoid(margin), questions weighing the same,
        # plus l2 / 2 |w|^2 — convex, so Newton's steps (halved while the loss rises) reach
        # the one minimum.
        margin = differences @ w
        p = _sigmoid(-margin)
        g = -(differences.T @ (weight * p)) + l2 * w
        h = (differences * (weight * p * (1 - p))[:, None]).T @ differences \
            + l2 * np.eye(len(w))
        step = np.linalg.solve(h, g)
        loss = _loss(differences, weight, w, l2)
        t = 1.0
        while t > 1e-4 and _loss(differences, weight, w - t * step, l2) > loss:
            t /= 2
        w = w - t * step
        if float(np.abs(t * step).max()) < 1e-9:
            break
    return Ranker(tuple(float(v) for v in w / scale))


def _loss(differences: np.ndarray, weight: np.ndarray, w: np.ndarray, l2: float) -> float:
    return float(weight @ np.logaddexp(0.0, -(differences @ w)) + 0.5 * l2 * w @ w)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def person(sample_id: str) -> str:
    """Whose conversation it is, across files: MemoryBank's `mb-zh-07` and `mb-en-07` are one
    user's chat in two languages (the same content); any other id is its own person."""
    return re.sub(r"^mb-[a-z]{2}-", "mb-", sample_id)


def leave_one_out(corpora: Sequence[Corpus], data: dict[str, Examples],
                  sets: dict[str, str] | None = None) -> dict[str, Ranker]:
    """Per conversation of `corpora`: the ranker trained on every conversation of `data` (by
    sample id) but those of its person (none when nothing is left, e.g. a file of one).
    `sets`: each sample id's data set — then every set weighs the same in the loss (its
    questions share its weight), so LoCoMo's 750 questions do not outvote MemoryBank's 100."""
    out = {}
    for corpus in corpora:
        held = person(corpus.conversation.sample_id)
        kept = [other for other in data if person(other) != held and data[other]]
        if kept:
            out[corpus.conversation.sample_id] = train(
                [g for other in kept for g in data[other]],
                weights=balanced(kept, data, sets) if sets else None)
    return out


def leave_one_set_out(data: dict[str, Examples], sets: dict[str, str]) -> dict[str, Ranker]:
    """Per data set named in `sets` (sample id -> set): the ranker trained on the other sets'
    conversations only, every set weighing the same (none for a set alone)."""
    out = {}
    for held in dict.fromkeys(sets.values()):
        kept = [i for i in data if sets[i] != held and data[i]]
        if kept:
            out[held] = train([g for i in kept for g in data[i]],
                              weights=balanced(kept, data, sets))
    return out


def held_out_rankers(corpora: Sequence[Corpus]) -> None:
    """Give each conversation the learned ranking's weights trained on the others (as `bench
    locomo --ranker held-out`; a file of one conversation keeps the knobs')."""
    depth = replace(Knobs(), depth=DEPTH)
    rankers = leave_one_out(corpora, {c.conversation.sample_id: examples(c, depth)
                                      for c in corpora})
    for corpus in corpora:
        corpus.ranker = rankers.get(corpus.conversation.sample_id)


def balanced(ids: Sequence[str], data: dict[str, Examples], sets: dict[str, str]
             ) -> list[float]:
    """Per question of `ids`' examples, in order: 1 / the questions of its set among them."""
    size: dict[str, int] = {}
    for i in ids:
        size[sets[i]] = size.get(sets[i], 0) + len(data[i])
    return [1.0 / size[sets[i]] for i in ids for _ in data[i]]


def dev_sets(data: Path | str) -> list[Path]:
    """`data` and the dev sets (`DEV_SETS`) in its folder: what held-out weights train on."""
    data = Path(data)
    beside = [data.parent / name for name in DEV_SETS if (data.parent / name).exists()]
    return [data] + [p for p in beside if p.resolve() != data.resolve()]


def held_out(corpora: Sequence[Corpus], budget: int, knobs: Knobs,
             rankers: dict[str, Ranker]) -> Result:
    """Each conversation scored with its own fold's ranker."""
    values, category = {}, {}
    for corpus in corpora:
        fold = replace(knobs, ranker=rankers[corpus.conversation.sample_id])
        result = simulate([corpus], budget, fold)
        values.update(result.recall)
        category.update(result.category)
    return Result(values, category)


def weights_module(ranker: Ranker, source: str) -> str:
    lines = [f'    "{name}": {weight!r},' for name, weight in ranker.to_dict().items()]
    doc = textwrap.fill(
        "The learned ranking's weights (gateway/core/recall/ranking.py), per raw unit of each "
        "feature, written by `python -m bench locomo-ranker --write` (bench/locomo/ranker.py): "
        f"trained on every conversation of {source} once leave-one-conversation-out had "
        'measured the ranking (bench/README.md, "Learned ranking").', 96,
        break_on_hyphens=False)
    return f'"""{doc}"""\n\nDEV_WEIGHTS = {{\n' + "\n".join(lines) + "\n}\n"


def fold_weights(data: Path | str, cache: Path | None = None, *,
                 segment: bool = True) -> dict[str, dict[str, float]]:
    """Per conversation of `data`: the weights trained on every other person's conversation of
    `data` and of the dev sets beside it (`dev_sets`, `leave_one_out`); `segment`: the
    gateway's `memory.index.segmentation`."""
    from gateway.memory.embedders.use import UseEmbedder
    vectors = VectorCache(cache or Path(tempfile.gettempdir()) / "locomo-sim", UseEmbedder())
    files = dev_sets(data)
    corpora = [[build_corpus(c, vectors, segment=segment) for c in load(str(f))] for f in files]
    vectors.save()
    knobs = replace(Knobs(), depth=DEPTH)
    examples_by = {c.conversation.sample_id: examples(c, knobs)
                   for group in corpora for c in group}
    sets = {c.conversation.sample_id: f.name for f, group in zip(files, corpora) for c in group}
    return {c: r.to_dict()
            for c, r in leave_one_out(corpora[0], examples_by, sets).items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench locomo-ranker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", action="append", default=None,
                        help="a LoCoMo-schema file to train and measure on (repeatable; "
                             "default: the dev sets, DEV_SETS, beside LoCoMo's)")
    parser.add_argument("--budgets", default=None,
                        help="budgets of every file (default: each file's own, shapes.BUDGETS, "
                             "else 2000)")
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "locomo-sim"))
    parser.add_argument("--write", action="store_true",
                        help=f"write the weights trained on every conversation to "
                             f"{WEIGHTS_MODULE}")
    args = parser.parse_args(argv)
    from gateway.memory.embedders.use import UseEmbedder
    files = args.data or dev_sets(DEFAULT_DATA)
    cache = VectorCache(Path(args.cache), UseEmbedder())
    sets = {Path(f).name: [build_corpus(c, cache) for c in load(str(f))] for f in files}
    cache.save()
    knobs = replace(Knobs(), depth=DEPTH)
    data = {c.conversation.sample_id: examples(c, knobs)
            for corpora in sets.values() for c in corpora}
    owner = {c.conversation.sample_id: name for name, corpora in sets.items() for c in corpora}
    by_set = leave_one_set_out(data, owner)
    for name, corpora in sets.items():
        rankers = leave_one_out(corpora, data, owner)
        budgets = budget_list(args.budgets) if args.budgets else BUDGETS.get(
            Path(name).stem, (2000,))
        for budget in budgets:
            print(report(simulate(corpora, budget, replace(knobs, depth=None, ranking="fusion")),
                         f"{name} {budget} fusion"))
            print(report(held_out(corpora, budget, knobs, rankers),
                         f"{name} {budget} learned, conversation held out"))
            if name in by_set:
                print(report(simulate(corpora, budget, replace(knobs, ranker=by_set[name])),
                             f"{name} {budget} learned, data set held out"))
    ranker = train([g for groups in data.values() for g in groups],
                   weights=balanced(list(data), data, owner))
    print("weights (per raw unit):", {k: round(v, 4) for k, v in ranker.to_dict().items()})
    if args.write:
        WEIGHTS_MODULE.write_text(weights_module(ranker, ", ".join(sets)))
        print(f"wrote {WEIGHTS_MODULE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
