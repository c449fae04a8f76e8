"""Training the learned ranking of recall's candidates (`gateway.core.recall.ranking`) on a
LoCoMo-schema file, and measuring it by leave-one-conversation-out.

    python -m bench locomo-ranker [--budgets 1000,2000] [--write]

For every question with evidence, the candidates are those the gateway's recaller would fuse
(simulated: bench/locomo/simulate.py, at the ranking's search depth), each with the features
`gateway.core.recall.ranking.feature_rows` computes in the gateway; a candidate is positive when it
holds one of the question's evidence turns verbatim. The model is linear, trained with a
pairwise logistic loss (each positive against each negative of its question: what matters is
that evidence ranks above the rest, within the budget), features standardised, L2-regularised,
by full-batch gradient descent — deterministic, no randomness.

Leave-one-conversation-out: for each conversation, a ranker trained on the others ranks its
questions; the held-out figures are reported next to plain fusion's, per budget. `--write`
then trains on every conversation and writes the weights the gateway ships
(gateway/core/recall/ranker_weights.py). Nothing of the data is written into the repository.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np

from bench.locomo.data import load
from bench.locomo.score import collapse
from bench.locomo.simulate import (DEFAULT_DATA, Corpus, Knobs, Result, VectorCache,
                                   build_corpus, candidates, report, simulate)
from gateway.core.recall.ranking import DEPTH, FEATURES, Ranker, feature_rows

L2 = 1e-2
ITERATIONS = 1500
STEP = 0.9
WEIGHTS_MODULE = Path(__file__).resolve().parents[2] / "gateway" / "core" / "ranker_weights.py"

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


def train(groups: Examples, *, l2: float = L2, iterations: int = ITERATIONS,
          step: float = STEP) -> Ranker:
    """A pairwise logistic ranker over `groups` (see the module docstring)."""
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
    weight = np.array([1.0 / len(d) for d in pairs for _ in range(len(d))]) / len(pairs)
    differences = np.vstack(pairs)
    w = np.zeros(len(FEATURES))
    for _ in range(iterations):
        margin = differences @ w
        # d/dw of -log sigmoid(margin), each question weighing the same.
        g = -(differences.T @ (weight * _sigmoid(-margin))) + l2 * w
        w -= step * g
    return Ranker(tuple(float(v) for v in w / scale))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def leave_one_out(corpora: Sequence[Corpus], data: dict[str, Examples]) -> dict[str, Ranker]:
    """Per conversation: the ranker trained on every other conversation (none for a
    conversation whose others have no question to train on, e.g. a file of one)."""
    out = {}
    for corpus in corpora:
        held = corpus.conversation.sample_id
        rest = [g for other, groups in data.items() if other != held for g in groups]
        if rest:
            out[held] = train(rest)
    return out


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
    return (f'"""The learned ranking\'s weights (gateway/core/recall/ranking.py), per raw unit '
            f'of each feature,\nwritten by `python -m bench locomo-ranker --write` '
            f'(bench/locomo/ranker.py): trained on\nevery conversation of {source} once '
            f'leave-one-conversation-out had measured the\nranking (bench/README.md, "Learned '
            f'ranking")."""\n\nDEV_WEIGHTS = {{\n' + "\n".join(lines) + "\n}\n")


def fold_weights(data: Path | str, cache: Path | None = None, *,
                 segment: bool = True) -> dict[str, dict[str, float]]:
    """Per conversation of `data`: the weights trained on every other conversation (see
    `leave_one_out`); `segment`: the gateway's `memory.index.segmentation`."""
    from gateway.memory.embedders.use import UseEmbedder
    vectors = VectorCache(cache or Path(tempfile.gettempdir()) / "locomo-sim", UseEmbedder())
    corpora = [build_corpus(c, vectors, segment=segment) for c in load(str(data))]
    vectors.save()
    knobs = replace(Knobs(), depth=DEPTH)
    examples_by = {c.conversation.sample_id: examples(c, knobs) for c in corpora}
    return {c: r.to_dict() for c, r in leave_one_out(corpora, examples_by).items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench locomo-ranker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--budgets", default="1000,2000")
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "locomo-sim"))
    parser.add_argument("--write", action="store_true",
                        help=f"write the weights trained on every conversation to "
                             f"{WEIGHTS_MODULE}")
    args = parser.parse_args(argv)
    from gateway.memory.embedders.use import UseEmbedder
    cache = VectorCache(Path(args.cache), UseEmbedder())
    corpora = [build_corpus(c, cache) for c in load(args.data)]
    cache.save()
    knobs = replace(Knobs(), depth=DEPTH)
    data = {c.conversation.sample_id: examples(c, knobs) for c in corpora}
    rankers = leave_one_out(corpora, data)
    for budget in [int(b) for b in args.budgets.split(",")]:
        print(report(simulate(corpora, budget, replace(knobs, depth=None, ranking="fusion")),
                     f"{budget} fusion"))
        print(report(held_out(corpora, budget, knobs, rankers), f"{budget} learned, held out"))
    ranker = train([g for groups in data.values() for g in groups])
    print("weights (per raw unit):", {k: round(v, 4) for k, v in ranker.to_dict().items()})
    if args.write:
        WEIGHTS_MODULE.write_text(weights_module(ranker, Path(args.data).name))
        print(f"wrote {WEIGHTS_MODULE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
