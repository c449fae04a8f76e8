"""`python -m bench locomo-table`: `bench locomo` result files joined into one table, every
shape of conversation side by side (bench/locomo/shapes.py).

    python -m bench locomo-table FILE.json [FILE.json ...] [--strategies gateway,hybrid]
                                 [--out FILE.md]

One column per (data file, budget) in the order the files are given, one row per strategy and
client mode — and per run settings (`--set …` of the run, e.g. the embedder), so two runs of the
same files with different settings make two rows each. A cell is evidence recall / answer
containment (strict rules, category "all"), and the null probes' recalled tokens when the run
measured them. The retrieval baselines (`hybrid`, …) do not depend on the gateway's settings:
each shows once, from the first run that has it. Every figure comes from the result files
only; the table names them and their machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from bench.locomo.shapes import NAMES

GATEWAY = "gateway"


def _label(meta: dict[str, Any]) -> str:
    overrides = meta["config"].get("overrides") or {}
    return ", ".join(f"{k}={v}" for k, v in sorted(overrides.items()))


def _cell(row: dict[str, Any]) -> str:
    evidence, answer = row.get("evidence_recall"), row.get("answer_containment")
    text = ("–" if evidence is None else f"{evidence:.3f}") + " / " + \
        ("–" if answer is None else f"{answer:.3f}")
    if row.get("null_probe_recalled_tokens") is not None:
        text += f" ({row['null_probe_recalled_tokens']:.0f})"
    return text


def join(results: Sequence[dict[str, Any]], strategies: Sequence[str]
         ) -> tuple[list[str], list[tuple[str, dict[str, str]]]]:
    """The columns, and each row's label and cells by column."""
    columns: list[str] = []
    rows: dict[tuple[str, str | None, str], dict[str, str]] = {}
    for result in results:
        meta = result["meta"]
        stem = Path(meta["config"]["data"]).stem
        name = NAMES.get(stem, stem)
        label = _label(meta)
        for r in result["results"]:
            if r["category"] != "all" or r["strategy"] not in strategies or r["budget"] is None:
                continue
            col = f"{name} {r['budget']:,}"
            if col not in columns:
                columns.append(col)
            key = (r["strategy"], r["mode"], label if r["strategy"] == GATEWAY else "")
            cells = rows.setdefault(key, {})
            cells.setdefault(col, _cell(r))
    order = {s: i for i, s in enumerate(strategies)}
    labelled = []
    for (strategy, mode, label), cells in sorted(
            rows.items(), key=lambda kv: (order[kv[0][0]], kv[0][2], kv[0][1] or "")):
        text = strategy + (f", {mode}" if mode else "") + (f" ({label})" if label else "")
        labelled.append((text, cells))
    return columns, labelled


def markdown(files: Sequence[Path], results: Sequence[dict[str, Any]],
             strategies: Sequence[str]) -> str:
    columns, rows = join(results, strategies)
    machines = {json.dumps(r["meta"]["machine"], sort_keys=True) for r in results}
    lines = ["| strategy | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    lines += [f"| {label} | " + " | ".join(cells.get(c, "–") for c in columns) + " |"
              for label, cells in rows]
    lines += ["", "Evidence recall / answer containment (strict rules), in brackets the null "
              "probes' recalled tokens. From: " + ", ".join(
                  f"{f.name} ({r['meta']['started']}, {r['meta']['duration_s']:.0f} s)"
                  for f, r in zip(files, results)) + ".",
              "Machine: " + "; ".join(sorted(machines)) + "."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench locomo-table", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", type=Path, nargs="+", help="`bench locomo` result files")
    parser.add_argument("--strategies", default="gateway,hybrid",
                        help="rows' strategies, comma-separated (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=None, help="also write FILE.md")
    args = parser.parse_args(argv)
    results = [json.loads(f.read_text("utf-8")) for f in args.files]
    text = markdown(args.files, results, [s.strip() for s in args.strategies.split(",")])
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
