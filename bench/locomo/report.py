"""Rendering result rows: a markdown report and a PNG plot (matplotlib, Agg backend)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

from bench.locomo.data import CATEGORIES

Row = dict[str, Any]


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _label(row: Row) -> tuple[str, str, str]:
    budget = "–" if row["budget"] is None else str(row["budget"])
    return row["strategy"], row["mode"] or "–", budget


def markdown(rows: Sequence[Row], meta: dict[str, Any]) -> str:
    config = meta.get("config", {})
    lines = [
        "# LoCoMo memory-quality benchmark",
        "",
        f"Data `{config.get('data')}` (sha256 `{str(config.get('data_sha256'))[:12]}…`), "
        f"conversations {config.get('conversations')}, limit {config.get('limit')}, "
        f"budgets {config.get('budgets')}, modes {config.get('modes')}; "
        f"run {meta.get('started')} in {meta.get('duration_s')} s.",
        "",
        "## All questions of categories 1–4",
        "",
        "| strategy | mode | budget | n | evidence recall | verbatim | answer containment "
        "| eligible | date recall | forwarded tokens | prefix reuse |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        if row["category"] != "all":
            continue
        lines.append("| {} | {} | {} | ".format(*_label(row)) + " | ".join([
            str(row["n"]), _fmt(row["evidence_recall"]), _fmt(row["evidence_recall_verbatim"]),
            _fmt(row["answer_containment"]), str(row["n_eligible"]), _fmt(row["date_recall"]),
            _fmt(row["forwarded_tokens_mean"], 0), _fmt(row["prefix_reuse"])]) + " |")
    for metric, title in (("evidence_recall", "Evidence recall by category"),
                          ("answer_containment", "Answer containment by category "
                                                 "(eligible questions)")):
        lines += ["", f"## {title}", "",
                  "| strategy | mode | budget | "
                  + " | ".join(f"{c} {CATEGORIES[c]}" for c in sorted(CATEGORIES)) + " |",
                  "|---|---|---:|" + "---:|" * len(CATEGORIES)]
        table: dict[tuple[str, str, str], dict[str, Any]] = defaultdict(dict)
        for row in rows:
            table[_label(row)][row["category"]] = row[metric]
        for label, cells in table.items():
            lines.append("| {} | {} | {} | ".format(*label) + " | ".join(
                _fmt(cells.get(str(c))) for c in sorted(CATEGORIES)) + " |")
    return "\n".join(lines) + "\n"


def plot(rows: Sequence[Row], path: Path | str) -> None:
    """Evidence recall (categories 1–4) vs mean forwarded tokens; one line per strategy and
    mode, points ordered by budget; x on a log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list[tuple[float, float, Any]]] = defaultdict(list)
    for row in rows:
        if row["category"] != "all" or row["evidence_recall"] is None:
            continue
        name = row["strategy"] + (f" ({row['mode']})" if row["mode"] else "")
        series[name].append((row["forwarded_tokens_mean"], row["evidence_recall"], row["budget"]))
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    for name, points in series.items():
        points.sort(key=lambda p: p[0])
        style = "--" if "stateful" in name else "-"
        ax.plot([p[0] for p in points], [p[1] for p in points], style, marker="o", label=name)
        for x, y, budget in points:
            if budget is not None:
                ax.annotate(str(budget), (x, y), textcoords="offset points", xytext=(4, -10),
                            fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("mean forwarded tokens per question (cl100k, log scale)")
    ax.set_ylabel("evidence recall (categories 1–4)")
    ax.set_ylim(0, 1.05)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("LoCoMo: evidence recall vs forwarded tokens (labels: budget)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
