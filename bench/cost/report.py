"""The cost benchmark's report: a markdown table per data set, and a chart per price rule."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

from bench.cost.pricing import PricedModel
from bench.cost.runs import Cell, Measured

Row = dict[str, Any]
CHARTED = (Cell("whole", None), Cell("truncate", 16000), Cell("before", 16000),
           Cell("gateway", 16000), Cell("gateway", "default"))
"""The assemblies drawn against history length (every row is in the cost–recall panel)."""


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def markdown(rows: Sequence[Row], meta: dict[str, Any]) -> str:
    models = list(dict.fromkeys(r["model"] for r in rows))
    lines = ["# What a turn costs: the gateway against the whole history with caching on", "",
             f"`{meta['command']}` — {meta['machine']['cores']} cores, "
             f"{meta['machine']['cpu_model']}, Python {meta['machine']['python']}; "
             f"started {meta['started']}, {meta['duration_s']} s.", "",
             "Cost per turn: mean input cost of a replayed request in US dollars at the "
             "model's prices in litellm's cost map (" + ", ".join(
                 f"{p['model']}: {p.get('rule', 'unpriced')}" for p in meta["prices"])
             + "), billed against the request before it under the provider's caching rules "
             "(bench/locomo/billing.py); × whole: against the whole history, caching on, "
             "over the same requests. Evidence recall: strict (bench/locomo/score.py). Budget: "
             "the window (`context.max_context_tokens`); `default`: the gateway as shipped "
             "(the 32,000 window, compacted to 8,000).", ""]
    by_data: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        by_data[section(row)].append(row)
    for data, group in by_data.items():
        first = {(r["assembly"], str(r["budget"])): r for r in group if r["model"] == models[0]}
        cost = {(r["assembly"], str(r["budget"]), r["model"]): r for r in group}
        seconds = meta["seconds"].get(data, meta["seconds"].get(group[0]["data"]))
        lines += [f"## {data}", "",
                  f"{next(iter(first.values()))['requests']} billed requests, history "
                  f"{_fmt(_whole_history(group), 0)} tokens per request on average; "
                  f"{seconds} s.", "",
                  "| assembly | budget | evidence recall | answers | null-probe recalled "
                  "tokens | recent turns kept | forwarded tokens | prefix reuse | "
                  + " | ".join(f"{m} × whole" for m in models)
                  + f" | {models[0]} $ / 1,000 turns |",
                  "|---|---|---:|---:|---:|---:|---:|---:|" + "---:|" * (len(models) + 1)]
        for (assembly, budget), r in first.items():
            ratios = " | ".join(_fmt(cost[(assembly, budget, m)]["cost_vs_whole"], 2)
                                for m in models)
            per_thousand = None if r["cost_per_turn"] is None else r["cost_per_turn"] * 1000
            lines.append(
                f"| {assembly} | {budget if budget != 'None' else '–'} | "
                f"{_fmt(r['evidence_recall'])} | {_fmt(r['answer_containment'])} | "
                f"{_fmt(r['null_probe_recalled_tokens'], 0)} | "
                f"{_fmt(r['recent_turns_kept'], 1)} | {_fmt(r['forwarded_tokens'], 0)} | "
                f"{_fmt(r['prefix_reuse'])} | {ratios} | {_fmt(per_thousand, 2)} |")
        lines.append("")
    return "\n".join(lines)


def section(row: Row) -> str:
    """A table's name: its data set, and the client's system prompt and the brief's budget
    when a run measured them (`--system-prompt-tokens`, `--brief-tokens`)."""
    name = row["data"]
    if row.get("system_prompt_tokens"):
        name += f", system prompt {row['system_prompt_tokens']:,} tokens"
    brief = row.get("brief_tokens")
    return name if brief is None else f"{name}, brief_tokens {brief}"


def _whole_history(group: Sequence[Row]) -> float | None:
    return next((r["history_tokens"] for r in group if r["assembly"] == "whole"),
                group[0]["history_tokens"])


def plot(measured: Sequence[Measured], rows: Sequence[Row], models: Sequence[PricedModel],
         stem: Path) -> list[Path]:
    """One PNG per model (price rule): cost per request against the history's length, and cost
    per turn against evidence recall."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for model in models:
        if model.price is None:
            continue
        fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.5), dpi=110)
        for cell in CHARTED:
            points = [(r.history_tokens, model.dollars(r.billed[model.provider]))
                      for m in measured if cell in m.tallies for r in m.tallies[cell].requests]
            if points:
                xs, ys = _binned(points)
                left.plot(xs, [y * 1000 for y in ys], marker=".",
                          label=f"{cell.assembly}" + (f" @ {cell.budget}" if cell.budget
                                                      else ""))
        left.set_xscale("log")
        left.set_xlabel("history at the request (tokens, log scale)")
        left.set_ylabel("input cost per request, $ per 1,000 requests")
        left.grid(True, which="both", alpha=0.3)
        left.legend(fontsize=7)
        markers = {"whole": "s", "truncate": "v", "before": "x", "gateway": "o"}
        for r in rows:
            if r["model"] != model.name or r["cost_per_turn"] is None \
                    or r["evidence_recall"] is None:
                continue
            right.scatter(r["cost_per_turn"] * 1000, r["evidence_recall"],
                          marker=markers[r["assembly"]], s=28)
            right.annotate(f"{r['data']} {r['assembly']} {r['budget'] or ''}",
                           (r["cost_per_turn"] * 1000, r["evidence_recall"]), fontsize=5,
                           xytext=(3, 2), textcoords="offset points")
        right.set_xscale("log")
        right.set_xlabel("cost per turn, $ per 1,000 turns (log scale)")
        right.set_ylabel("evidence recall (strict)")
        right.set_ylim(0, 1.05)
        right.grid(True, which="both", alpha=0.3)
        fig.suptitle(f"{model.name} ({model.rule}): cost against history length and recall")
        fig.tight_layout()
        path = stem.with_name(f"{stem.name}-{model.rule}.png")
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written


def _binned(points: list[tuple[int, float | None]], bins: int = 24
            ) -> tuple[list[float], list[float]]:
    """Means of x and y over `bins` groups of points of neighbouring x."""
    ordered = sorted((x, y) for x, y in points if y is not None)
    size = max(1, len(ordered) // bins)
    groups = [ordered[i:i + size] for i in range(0, len(ordered), size)]
    return ([sum(x for x, _ in g) / len(g) for g in groups],
            [sum(y for _, y in g) / len(g) for g in groups])
