"""Write a run's results: JSON (the data), markdown (the table) and PNG (added p50 latency by
target and concurrency, non-streaming and streaming), all with the same stem."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from bench.overhead.stats import Row


def write_all(out: Path, meta: dict[str, Any], results: Sequence[Row],
              extra: dict[str, Any]) -> list[Path]:
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"meta": meta, "results": list(results), **extra}
    out.write_text(json.dumps(doc, indent=2) + "\n")
    md = out.with_suffix(".md")
    md.write_text(markdown(meta, results, extra.get("persist_on", [])))
    png = out.with_suffix(".png")
    plot(results, png, meta)
    return [out, md, png]


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.1f}" if abs(value) >= 100 else f"{value:.2f}"
    return str(value)


def table(results: Sequence[Row]) -> str:
    head = ("target", "stream", "c", "n", "p50 ms", "p95 ms", "p99 ms", "added p50 ms",
            "added p99 ms", "req/s")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        lines.append("| " + " | ".join(_cell(v) for v in (
            r["target"], "yes" if r["stream"] else "no", r["concurrency"], r["n"], r["p50_ms"],
            r["p95_ms"], r["p99_ms"], r["added_p50_ms"], r["added_p99_ms"], r["rps"])) + " |")
    return "\n".join(lines)


def markdown(meta: dict[str, Any], results: Sequence[Row], persist_on: Sequence[Row]) -> str:
    m = meta["machine"]
    pin = meta["pinning"]
    mem = meta.get("memory", {})
    parts = [
        "# Gateway overhead vs direct and vs LiteLLM's proxy",
        "",
        f"{meta['started']}, {meta['duration_s']:.0f} s. {m['cores']} cores ({m['cpu_model']}), "
        f"Python {m['python']}, {m['platform']}. gateway {meta['versions']['gateway']}, "
        f"litellm {meta['versions']['litellm']}. {meta['workers']} worker(s) each for the "
        f"gateway and LiteLLM's proxy. Pinning: "
        + (f"server under test on core {pin['server_core']}, load generator and fake upstream "
           f"on core {pin['load_core']}." if pin["used"] else "none."),
        "",
        "Latency is per request as the client sees it; with streaming it is the time to the "
        "first body bytes. `added` = target − direct, same percentile, same cell (stream × "
        "concurrency), where the targets ran interleaved in "
        f"{meta['rounds']} rounds with {meta['warmup']}+ warm-up requests before each. "
        "req/s is measured at that concurrency (a closed loop), not a saturation search.",
        "",
        f"gateway-memory: a stateful client (only the new user message) on a conversation of "
        f"{mem.get('history_turns', '?')} stored turns ({mem.get('tokens_original', '?')} "
        f"tokens; the rewrite forwards {mem.get('tokens_forwarded', '?')}), with "
        "`X-Gateway-Persist: false` so the conversation does not grow. Its added latency "
        "includes the fake upstream parsing the larger forwarded context.",
        "",
        table(results),
        "",
    ]
    if persist_on:
        parts += [
            "## With persistence on (each request also records its turn)",
            "",
            f"Concurrency 1, non-streaming; the conversation grows from "
            f"{mem.get('history_turns', '?')} turns to "
            f"{mem.get('persist_on_final_tokens_original', '?')} tokens stored during the run.",
            "",
            table(persist_on),
            "",
        ]
    if meta.get("server_overhead_p50_ms"):
        parts += ["## Overhead the servers report themselves (p50 of response headers)", "",
                  "`x-gateway-overhead-ms` (gateway: time before the upstream call) and "
                  "`x-litellm-overhead-duration-ms`.", "",
                  "| cell | p50 ms |", "|---|---|"]
        parts += [f"| {k} | {v:.2f} |" for k, v in meta["server_overhead_p50_ms"].items()]
        parts.append("")
    if meta.get("errors"):
        parts += ["## Errors", "", "```", json.dumps(meta["errors"], indent=2), "```", ""]
    return "\n".join(parts)


def plot(results: Sequence[Row], path: Path, meta: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets = [t for t in dict.fromkeys(r["target"] for r in results) if t != "direct"]
    levels = sorted({r["concurrency"] for r in results})
    streams = sorted({r["stream"] for r in results})
    fig, axes = plt.subplots(1, len(streams), figsize=(6 * len(streams), 4.5), squeeze=False)
    width = 0.8 / max(1, len(targets))
    for ax, stream in zip(axes[0], streams):
        for i, target in enumerate(targets):
            values = []
            for c in levels:
                match = [r for r in results if r["target"] == target and r["stream"] == stream
                         and r["concurrency"] == c]
                values.append(match[0]["added_p50_ms"] or 0.0 if match else 0.0)
            xs = [x + (i - (len(targets) - 1) / 2) * width for x in range(len(levels))]
            bars = ax.bar(xs, [max(v, 0.01) for v in values], width, label=target)
            ax.bar_label(bars, labels=[f"{v:.1f}" for v in values], fontsize=7)
        ax.set_xticks(range(len(levels)), [f"c={c}" for c in levels])
        ax.set_yscale("log")
        ax.set_ylabel("added p50 latency over direct, ms (log)")
        ax.set_title("streaming (time to first byte)" if stream else "non-streaming")
        ax.legend(fontsize=8)
    fig.suptitle(f"Added latency, {meta['workers']} worker(s), "
                 f"{'pinned' if meta['pinning']['used'] else 'unpinned'}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
