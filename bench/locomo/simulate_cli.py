"""`python -m bench locomo-simulate`: the command line of the offline recall simulation
(bench/locomo/simulate.py, whose docstring is its help), with the learned ranking's weights
trained per fold by bench/locomo/ranker.py. Kept apart from both so that neither imports the
other back: the simulation knows nothing of training, training uses the simulation, and this
module uses both."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
from dataclasses import fields, replace
from pathlib import Path
from typing import Sequence

from bench.locomo import simulate as simulation
from bench.locomo.data import load
from bench.locomo.null_probes import null_probes
from bench.locomo.ranker import held_out_rankers
from bench.locomo.shapes import budget_list, column, shapes
from bench.locomo.simulate import (Knobs, Result, build_corpus, leave_one_out,
                                   null_probe_tokens, parse_value, report, simulate, table)
from bench.locomo.vector_cache import VectorCache
from bench.machine import machine


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench locomo-simulate",
                                     description=simulation.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", action="append", default=[], metavar="PATH[@B1,B2]",
                        help="a LoCoMo-schema file and its budgets (repeatable; default: the "
                             "three shapes of bench/locomo/shapes.py at their budgets)")
    parser.add_argument("--budgets", default=None,
                        help="budgets of a --data file given without its own (default 2000), "
                             "or of the three shapes")
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "locomo-sim"))
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help=f"a knob ({', '.join(f.name for f in fields(Knobs))})")
    parser.add_argument("--loo", action="append", default=[], metavar="NAME=V1,V2,...",
                        help="tune these knobs by leave-one-conversation-out over the grid")
    parser.add_argument("--ranker", choices=("held-out", "shipped"), default="held-out",
                        help="the learned ranking's weights per conversation: trained on the "
                             "file's other conversations (default, as `bench locomo`), or "
                             "the gateway's own")
    parser.add_argument("--out", default=None, help="also write the report to FILE.md")
    args = parser.parse_args(argv)
    knobs = Knobs()
    for item in args.set:
        name, value = item.split("=", 1)
        knobs = replace(knobs, **{name: parse_value(value)})
    from gateway.memory.embedders.use import UseEmbedder
    cache = VectorCache(Path(args.cache), UseEmbedder())
    chosen = shapes(args.data, budget_list(args.budgets) if args.budgets else None)
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    rows: list[tuple[str, Result, float]] = []
    for shape in chosen:
        corpora = [build_corpus(c, cache, context=knobs.context) for c in load(str(shape.path))]
        for corpus in corpora:
            probes = null_probes([str(m.content) for m in corpus.messages])
            corpus.query_vectors.update(zip(probes, cache.embed(list(probes))))
        cache.save()
        if args.ranker == "held-out" and knobs.ranking == "learned":
            held_out_rankers(corpora)
        for budget in shape.budgets:
            label = column(shape, budget)
            if args.loo:
                grid = [(name, [parse_value(v) for v in values.split(",")])
                        for name, values in (item.split("=", 1) for item in args.loo)]
                leave_one_out(corpora, budget, knobs, grid, label=label, say=say)
                continue
            result = simulate(corpora, budget, knobs)
            tokens = null_probe_tokens(corpora, budget, knobs)
            rows.append((label, result, tokens))
            say(report(result, label) + f"  null-probe recalled tokens {tokens:.0f}")
    if rows:
        say("")
        say(table(rows))
    if args.out:
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        command = " ".join(argv if argv is not None else sys.argv[1:])
        Path(args.out).write_text(
            "# Recall simulated offline (`bench/locomo/simulate.py`)\n\n"
            f"`python -m bench locomo-simulate {command}`\n\nMachine: {json.dumps(machine())}; "
            f"written {started}; ranking weights: {args.ranker}; knobs: "
            f"{', '.join(args.set) or 'the gateway defaults'}. Evidence recall (strict rules) "
            "of stateless prompts; null-probe recalled tokens: mean per probe.\n\n```\n"
            + "\n".join(lines) + "\n```\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
