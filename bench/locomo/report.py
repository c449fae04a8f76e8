"""Rendering result rows: a markdown report and a PNG plot (matplotlib, Agg backend).

Both show the strict headline metrics only (score.py): evidence recall over categories 1–5
and answer containment of the whole answer over the eligible questions of categories 1–4.
The lenient figures stay in the JSON.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

from bench.locomo.data import CATEGORIES

Row = dict[str, Any]
REFERENCE = "hybrid"


def _fmt(value: Any, digits: int = 3, sign: bool = False) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"
    return str(value)


def _diff(a: Any, b: Any) -> float | None:
    return None if a is None or b is None else a - b


def _name(row: Row) -> str:
    return row["strategy"] + (f" ({row['mode']})" if row["mode"] else "")


def _ranker(config: dict[str, Any]) -> str:
    if config.get("ranker") == "held-out":
        return ("held out — each conversation's tenants use weights trained on the file's "
                "other conversations")
    return "the gateway's shipped ones"


def markdown(rows: Sequence[Row], meta: dict[str, Any]) -> str:
    config, counts = meta.get("config", {}), meta.get("counts", {})
    budgets = sorted({r["budget"] for r in rows if r["budget"] is not None})
    by_key: dict[tuple[str, str | None, int | None], dict[str, Row]] = defaultdict(dict)
    for row in rows:
        if row.get("question_type") is None:
            by_key[(row["strategy"], row["mode"], row["budget"])][row["category"]] = row
    lines = [
        "# LoCoMo memory-quality benchmark",
        "",
        f"Data `{config.get('data')}` (sha256 `{str(config.get('data_sha256'))[:12]}…`), "
        f"conversations {config.get('conversations')}, limit {config.get('limit')}, "
        f"budgets {config.get('budgets')}, modes {config.get('modes')}.",
        "",
        f"**Wall time: {meta.get('duration_s')} s** (started {meta.get('started')}; "
        f"{counts.get('gateway_requests')} gateway requests; "
        f"{meta.get('machine', {}).get('cores')} cores).",
        "",
        f"Questions: {counts.get('questions')}; with evidence (evidence recall, categories "
        f"1–5): {counts.get('with_evidence')}; eligible for answer containment (categories 1–4, "
        f"whole normalised answer occurs in the history): {counts.get('answer_eligible')}.",
        "",
        f"Answered without memory (the gateway failed open, a store call timed out): "
        f"{counts.get('fail_open_replay_requests')} replay requests; "
        f"{counts.get('fail_open_probes_retried')} probes, asked again one at a time, "
        f"{counts.get('fail_open_probes_scored')} of them still without memory (scored as "
        f"they are).",
        "",
        f"Learned ranking's weights: {_ranker(config)}; gateway settings changed: "
        f"{config.get('overrides') or 'none'}.",
        "",
        "Evidence recall: share of a question's evidence turns present verbatim (NFKC, "
        "whitespace collapsed) in the forwarded context; answer containment: the whole "
        "normalised answer is a substring of the normalised context. Strict figures as in "
        "bench-data/REFERENCE.md; lenient ones are in the JSON only. Margins: the gateway "
        f"minus `{REFERENCE}` at the same budget, same run.",
    ]
    header = ("| strategy | mode | evidence recall | "
              + " | ".join(f"{c} {CATEGORIES[c]}" for c in sorted(CATEGORIES))
              + " | answer containment | forwarded tokens | Δ recall vs hybrid "
              "| Δ answer vs hybrid |")
    align = "|---|---|" + "---:|" * (len(CATEGORIES) + 5)
    for budget in budgets:
        lines += ["", f"## Budget {budget} tokens", "", header, align]
        reference = by_key.get((REFERENCE, None, budget), {}).get("all")
        keys = [k for k in by_key if k[2] in (budget, None)]
        for key in keys:
            cells = by_key[key]
            row = cells.get("all")
            if row is None:
                continue
            margin = ["", ""]
            if key[0] == "gateway" and reference is not None:
                margin = [_fmt(_diff(row["evidence_recall"], reference["evidence_recall"]),
                               sign=True),
                          _fmt(_diff(row["answer_containment"],
                                     reference["answer_containment"]), sign=True)]
            lines.append(f"| {key[0]} | {key[1] or '–'} | {_fmt(row['evidence_recall'])} | "
                         + " | ".join(_fmt(cells[str(c)]["evidence_recall"])
                                      if str(c) in cells else "–" for c in sorted(CATEGORIES))
                         + f" | {_fmt(row['answer_containment'])} | "
                         f"{_fmt(row['forwarded_tokens_mean'], 0)} | {margin[0]} | "
                         f"{margin[1]} |")
    lines += ["", "`full` and `last-n` do not depend on the budget: the same row in every "
              "table.", ""]
    lines += _by_type(rows)
    lines += _costs(by_key)
    return "\n".join(lines)


def _by_type(rows: Sequence[Row]) -> list[str]:
    """Evidence recall per question type (LongMemEval's), and what recall adds on abstention
    questions (the answer was never said) against the answerable ones."""
    typed = [r for r in rows if r.get("question_type")]
    if not typed:
        return []
    types = sorted({r["question_type"] for r in typed})
    cells: dict[tuple[str, str | None, int | None], dict[str, Row]] = defaultdict(dict)
    for r in typed:
        cells[(r["strategy"], r["mode"], r["budget"])][r["question_type"]] = r
    lines = ["## By question type", "",
             "Evidence recall (n questions with evidence); abstention types (`_abs`: the "
             "answer was never said) have no evidence: their cell is the gateway's recalled "
             "tokens per question.", "",
             "| strategy | mode | budget | " + " | ".join(types) + " |",
             "|---|---|---:|" + "---:|" * len(types)]
    for key in sorted(cells, key=lambda k: (k[2] or 0, k[0], k[1] or "")):
        row = cells[key]

        def cell(t: str) -> str:
            r = row.get(t)
            if r is None:
                return "–"
            if t.endswith("_abs"):
                recalled = r["recalled_tokens_mean"]
                return "–" if recalled is None else f"recalled {_fmt(recalled, 0)}"
            return f"{_fmt(r['evidence_recall'])} ({r['n_evidence']})"
        lines.append(f"| {key[0]} | {key[1] or '–'} | {key[2] or '–'} | "
                     + " | ".join(cell(t) for t in types) + " |")
    lines += ["", "Recall on abstention questions against answerable ones (the gateway's "
              "recalled-block tokens, mean per question; target ≤ 25 %):", ""]
    for key in sorted(cells, key=lambda k: (k[2] or 0, k[1] or "")):
        if key[0] != "gateway":
            continue
        abstain = _weighted(r for t, r in cells[key].items() if t.endswith("_abs"))
        answer = _weighted(r for t, r in cells[key].items() if not t.endswith("_abs"))
        share = f"{abstain / answer:.0%}" if abstain is not None and answer else "–"
        lines.append(f"- {key[1]}, {key[2]} tokens: {_fmt(abstain, 0)} on abstention vs "
                     f"{_fmt(answer, 0)} on answerable questions ({share})")
    return lines + [""]


def _weighted(rows: Any) -> float | None:
    pairs = [(r["recalled_tokens_mean"], r["n"]) for r in rows
             if r["recalled_tokens_mean"] is not None]
    total = sum(n for _, n in pairs)
    return sum(v * n for v, n in pairs) / total if total else None


def _costs(by_key: dict[tuple[str, str | None, int | None], dict[str, Row]]) -> list[str]:
    """The cost table: each assembly's mean input cost per replayed turn under each provider's
    cache rules, and that against the whole history with caching on (`full`)."""
    rows = [(key, cells["all"]) for key, cells in by_key.items()
            if "all" in cells and (cells["all"].get("cost_per_turn")
                                   or cells["all"].get("null_probe_recalled_tokens") is not None)]
    rules = next((list(r["cost_per_turn"]) for _, r in rows if r.get("cost_per_turn")), [])
    if not rows or not rules:
        return []
    lines = ["## Cost per replayed turn", "",
             "Mean input cost of a replay request in uncached-input-token units (output left "
             "out), billed against the request before it under each provider's prompt-cache "
             "rules (bench/locomo/billing.py), and × the whole history's (`full`, caching on) "
             "over the same requests (none for the gateway when its histories were imported: no "
             "replay requests). Null-probe recalled tokens: what recall added to messages "
             "that need no memory (bench/locomo/null_probes.py).", "",
             "| strategy | mode | budget | prefix reuse | "
             + " | ".join(f"{r} | × whole" for r in rules) + " | null-probe recalled tokens |",
             "|---|---|---:|---:|" + "---:|---:|" * len(rules) + "---:|"]
    for (strategy, mode, budget), row in sorted(rows, key=lambda item: (
            item[0][2] or 0, item[0][0], item[0][1] or "")):
        ratio, cost = row.get("cost_vs_whole") or {}, row.get("cost_per_turn") or {}
        lines.append(f"| {strategy} | {mode or '–'} | {budget or '–'} | "
                     f"{_fmt(row['prefix_reuse'])} | "
                     + " | ".join(f"{_fmt(cost.get(r), 0)} | "
                                  f"{_fmt(ratio.get(r), 2)}" for r in rules)
                     + f" | {_fmt(row.get('null_probe_recalled_tokens'), 0)} |")
    return lines + [""]


def plot(rows: Sequence[Row], path: Path | str) -> None:
    """Strict evidence recall (categories 1–5) and answer containment (eligible, categories
    1–4) vs mean forwarded tokens; one line per strategy and mode, points ordered by budget;
    x on a log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 5), dpi=110)
    for ax, metric, label in ((axes[0], "evidence_recall", "evidence recall (categories 1–5)"),
                              (axes[1], "answer_containment",
                               "answer containment (eligible, categories 1–4)")):
        series: dict[str, list[tuple[float, float, Any]]] = defaultdict(list)
        for row in rows:
            if row["category"] != "all" or row[metric] is None:
                continue
            series[_name(row)].append((row["forwarded_tokens_mean"], row[metric], row["budget"]))
        for name, points in series.items():
            points.sort(key=lambda p: p[0])
            style = "-" if name.startswith("gateway") else "--"
            ax.plot([p[0] for p in points], [p[1] for p in points], style, marker="o",
                    label=name)
            for x, y, budget in points:
                if budget is not None:
                    ax.annotate(str(budget), (x, y), textcoords="offset points",
                                xytext=(4, -10), fontsize=7)
        ax.set_xscale("log")
        ax.set_xlabel("mean forwarded tokens per question (cl100k, log scale)")
        ax.set_ylabel(label)
        ax.set_ylim(0, 1.05)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("LoCoMo (strict metrics) vs forwarded tokens; labels: budget")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
