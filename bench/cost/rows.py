"""The cost benchmark's rows: one per (data, assembly, budget, model).

Keys (issue 23's, and a few more):
- `data`, `assembly` (`whole`, `truncate`, `before`, `gateway`), `budget` (the window in
  tokens; `"default"`: the gateway as shipped; None for `whole`), `system_prompt_tokens` (the
  client's own system prompt, sent first in every request of every assembly: 0 for none),
  `brief_tokens` (the served assemblies' `memory.brief_tokens` in the run; None: as shipped;
  the client's own rows of the run carry it too, as their table's key), `model`, `rule` (the
  provider's cache rule with the model's read price: `openai-0.25`, `openai-0.1`,
  `anthropic`, `deepseek`);
- `requests`: the billed requests (replayed turns); `history_tokens`: the client's whole
  prompt at them, mean; `forwarded_tokens`: the prompt sent, mean (both counted as the gateway
  counts); `prefix_reuse`: the mean share of a prompt that repeats the previous prompt's
  prefix; `cached_share`: of all forwarded tokens, those the provider reads from its cache;
- `fits_share`, `cost_vs_whole_fits`, `cost_vs_whole_beyond`: the share of billed requests
  whose whole history fits the window, and the cost × the whole history's over those
  requests and over the others (issue 23's "never worse where the history fits");
- `cost_per_turn`: the mean input cost of a billed request in US dollars at the model's
  prices (None when the installed litellm map does not price it), `cost_vs_whole`: divided by
  the `whole` row's of the same data and model (the same requests);
- `evidence_recall`, `answer_containment`: the probes' strict figures (bench/locomo/score.py),
  `probes`: how many; `null_probe_recalled_tokens`: the recalled block's tokens on the null
  probes, mean (0 for a client that recalls nothing); `recent_turns_kept`: user turns of
  history in the prompt, mean over the billed requests.
"""

from __future__ import annotations

from statistics import fmean
from typing import Any, Iterable, Sequence

from bench.cost.pricing import PricedModel
from bench.cost.runs import DEFAULT_WINDOW, Cell, Measured
from bench.cost.tally import Tally
from bench.locomo.replay import RESERVE


def rows(measured: Measured, models: Sequence[PricedModel]) -> list[dict[str, Any]]:
    out = []
    whole = measured.tallies.get(Cell("whole", None))
    for cell, tally in measured.tallies.items():
        scores = measured.scores.get(cell, [])
        for model in models:
            cost = _cost_per_turn(tally, model)
            base = _cost_per_turn(whole, model) if whole is not None else None
            out.append({
                "data": measured.data.name, "assembly": cell.assembly, "budget": cell.budget,
                "system_prompt_tokens": measured.system_prompt_tokens,
                "brief_tokens": measured.brief_tokens,
                "model": model.name, "rule": model.rule,
                "requests": len(tally.requests),
                "history_tokens": tally.mean("history_tokens"),
                "forwarded_tokens": tally.mean("forwarded"),
                "prefix_reuse": tally.prefix_reuse(),
                "cached_share": tally.cached_share(model.provider),
                "cost_per_turn": None if cost is None else round(cost, 8),
                "cost_vs_whole": round(cost / base, 3) if cost is not None and base else None,
                **_by_fit(tally, whole, model, _window(cell)),
                "evidence_recall": _mean(s.evidence_recall for s in scores),
                "answer_containment": _mean(s.answer_containment for s in scores),
                "probes": len(scores),
                "null_probe_recalled_tokens": _mean(measured.null_tokens.get(cell, [])),
                "recent_turns_kept": tally.mean("recent_turns"),
            })
    return out


def _window(cell: Cell) -> int:
    """The prompt budget a whole history must fit (the window less the completion's)."""
    window = DEFAULT_WINDOW if cell.budget in ("default", None) else int(cell.budget)
    return window - RESERVE


def _by_fit(tally: Tally, whole: Tally | None, model: PricedModel, budget: int
            ) -> dict[str, Any]:
    """`fits_share`: of the billed requests, those whose whole history (the client's prompt)
    fits the window, by the benchmark's count; `cost_vs_whole_fits` /
    `cost_vs_whole_beyond`: the cost × the whole history's over those requests and over the
    others (None where there are none, or no price)."""
    fits = {r.request for r in tally.requests if r.history_tokens <= budget}
    out: dict[str, Any] = {"fits_share": round(len(fits) / len(tally.requests), 4)
                           if tally.requests else None}
    base = {r.request: model.dollars(r.billed[model.provider])
            for r in (whole.requests if whole is not None else [])}
    for name, inside in (("cost_vs_whole_fits", True), ("cost_vs_whole_beyond", False)):
        mine = [(model.dollars(r.billed[model.provider]), base.get(r.request))
                for r in tally.requests if (r.request in fits) == inside]
        if not mine or any(a is None or b is None for a, b in mine):
            out[name] = None
            continue
        total = sum(b for _, b in mine)
        out[name] = round(sum(a for a, _ in mine) / total, 3) if total else None
    return out


def _cost_per_turn(tally: Tally, model: PricedModel) -> float | None:
    costs = [model.dollars(r.billed[model.provider]) for r in tally.requests]
    if not costs or any(c is None for c in costs):
        return None
    return fmean(costs)


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(fmean(present), 4) if present else None
