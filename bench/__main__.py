"""`python -m bench <benchmark> [args]`: dispatch to the benchmark's own command line.

Each benchmark is a module with `main(argv) -> int`; add one by adding a line to BENCHMARKS.
"""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = {
    "agent": "bench.agent.cli",
    "cost": "bench.cost.cli",
    "locomo": "bench.locomo.cli",
    "locomo-ablation": "bench.locomo.ablation",
    "locomo-ranker": "bench.locomo.ranker",
    "locomo-rescore": "bench.locomo.rescore",
    "locomo-simulate": "bench.locomo.simulate_cli",
    "locomo-floor": "bench.locomo.floor",
    "locomo-table": "bench.locomo.table",
    "overhead": "bench.overhead.cli",
    "recall-latency": "bench.recall_latency",
    "rewrite-cost": "bench.rewrite_cost",
    "load": "bench.load.cli",
    "writeback": "bench.writeback",
    "tracing-overhead": "bench.tracing_overhead",
    "ratelimit": "bench.ratelimit",
    "encryption-overhead": "bench.encryption_overhead",
    "console-overhead": "bench.console_overhead",
    "stored-cap": "bench.stored_cap",
    "topics-overhead": "bench.topics_overhead",
    "usage-overhead": "bench.usage_overhead",
    "cluster": "bench.cluster",
    "soak": "bench.soak.cli",
    "large-request": "bench.large_request",
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in BENCHMARKS:
        print(f"usage: python -m bench {{{','.join(BENCHMARKS)}}} [options]", file=sys.stderr)
        return 2
    module = importlib.import_module(BENCHMARKS[args[0]])
    return int(module.main(args[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
