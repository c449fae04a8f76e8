"""Aggregating observations into the result rows of the JSON file.

One row per (strategy, mode, budget, category) with the stable keys
`strategy, mode, budget, category, n, evidence_recall, answer_containment, date_recall,
forwarded_tokens_mean, prefix_reuse` (plus `n_evidence`, `n_eligible` and the lenient,
secondary figures `evidence_recall_lenient`, `answer_containment_parts`, `n_eligible_parts`;
see score.py).
- `category` is "1".."5", or "all" = categories 1–5 together (answer containment is only
  defined for categories 1–4, so its "all" figure is over those);
- `mode` is None for the baselines (computed from the client's history, mode-independent);
  `budget` is None for `full` and `last-n`, which do not depend on it;
- `n`: questions in the row; `evidence_recall` over those with resolvable evidence
  (`n_evidence`); `answer_containment` over the eligible ones (`n_eligible`), None for
  category 5;
  `date_recall` over the temporal (category 2) ones, None where there are none;
- `forwarded_tokens_mean`: mean count_messages of the whole forwarded prompt per question;
- `prefix_reuse`: mean over the replay requests (not per category: the same on every row of
  the strategy/mode/budget);
- `cost_per_turn`: per cache rule (billing.py), the mean input cost of a replay request in
  uncached-token units, and `cost_vs_whole` the same divided by the `full` strategy's (the
  whole history, sent with that provider's caching on) over the same requests — per
  strategy/mode/budget like `prefix_reuse`;
- `null_probe_recalled_tokens`: the gateway's recalled-block tokens on the null probes, mean
  per probe (null_probes.py; None for the baselines);
- `recalled_tokens_mean`: the gateway's recalled-block tokens on the row's questions, mean per
  question (None for the baselines);
- `question_type`: None on the rows above; a file with LongMemEval's types
  (`Question.question_type`) also has one row per (strategy, mode, budget, type), its
  `category` "type" — so an abstention type's `recalled_tokens_mean` is what recall adds when
  the answer was never said, beside the answerable types'.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import fmean
from typing import Any, Iterable, Sequence

from bench.locomo.dump import Key
from bench.locomo.replay import Observation, Outcome

CATEGORY_KEYS = ("1", "2", "3", "4", "5", "all")
STRATEGY_ORDER = ("gateway", "full", "truncate", "last-n", "bm25", "dense", "hybrid")
MODE_ORDER = ("stateless", "stateful", "sessions", "continued")


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(fmean(present), 4) if present else None


def _sort_key(key: Key) -> tuple[int, int, int]:
    strategy, mode, budget = key
    return (STRATEGY_ORDER.index(strategy) if strategy in STRATEGY_ORDER else 99,
            MODE_ORDER.index(mode) if mode in MODE_ORDER else 99, budget or 0)


def rows(outcomes: Sequence[Outcome]) -> list[dict[str, Any]]:
    by_key: dict[Key, list[Observation]] = defaultdict(list)
    reuse: dict[Key, list[float]] = defaultdict(list)
    costs: dict[Key, list[dict[str, float]]] = defaultdict(list)
    null_recalled: dict[Key, list[int]] = defaultdict(list)
    for outcome in outcomes:
        for obs in outcome.observations:
            by_key[obs.key].append(obs)
        for key, values in outcome.prefix_reuse.items():
            reuse[key].extend(values)
        for key, bills in outcome.costs.items():
            costs[key].extend(bills)
        for key, tokens in outcome.null_recalled.items():
            null_recalled[key].extend(tokens)
    per_turn = {key: {rule: round(fmean(b[rule] for b in bills), 1) for rule in bills[0]}
                for key, bills in costs.items() if bills}
    whole = per_turn.get(("full", None, None), {})
    out = []
    for key in sorted(by_key, key=_sort_key):
        strategy, mode, budget = key
        types = sorted({o.question.question_type for o in by_key[key]
                        if o.question.question_type})
        groups = [(category, None, [o for o in by_key[key]
                                    if category in ("all", str(o.question.category))])
                  for category in CATEGORY_KEYS]
        groups += [("type", t, [o for o in by_key[key] if o.question.question_type == t])
                   for t in types]
        for category, question_type, group in groups:
            if not group:
                continue
            answers = [o.score.answer_containment for o in group]
            parts = [o.score.answer_containment_parts for o in group]
            out.append({
                "strategy": strategy, "mode": mode, "budget": budget, "category": category,
                "question_type": question_type, "n": len(group),
                "evidence_recall": _mean(o.score.evidence_recall for o in group),
                "answer_containment": _mean(answers),
                "date_recall": _mean(o.score.date_recall for o in group),
                "forwarded_tokens_mean": round(fmean(o.tokens for o in group), 1),
                "prefix_reuse": _mean(reuse.get(key, [])),
                "cost_per_turn": per_turn.get(key),
                "cost_vs_whole": {rule: round(c / whole[rule], 3)
                                  for rule, c in per_turn.get(key, {}).items()
                                  if whole.get(rule)} or None,
                "null_probe_recalled_tokens": _mean(null_recalled.get(key, [])),
                "recalled_tokens_mean": _mean(o.recalled for o in group),
                "n_evidence": sum(1 for o in group if o.score.evidence_recall is not None),
                "n_eligible": sum(1 for a in answers if a is not None),
                "evidence_recall_lenient": _mean(o.score.evidence_recall_lenient
                                                 for o in group),
                "answer_containment_parts": _mean(parts),
                "n_eligible_parts": sum(1 for p in parts if p is not None),
            })
    return out
