"""Write a run's results: JSON (the data), markdown (targets, placement, bodies, tables) and PNG
(added p50 latency by target and concurrency, per conversation length and streaming), all with
the same stem."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from bench.overhead.stats import Row


def write_all(out: Path, meta: dict[str, Any], results: Sequence[Row],
              targets: Sequence[dict[str, Any]]) -> list[Path]:
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"meta": meta, "targets": list(targets), "results": list(results)}
    out.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    md = out.with_suffix(".md")
    md.write_text(markdown(meta, results, targets))
    png = out.with_suffix(".png")
    plot(results, png, meta)
    return [out, md, png]


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.1f}" if abs(value) >= 100 else f"{value:.2f}"
    return str(value)


def table(results: Sequence[Row]) -> str:
    head = ("target", "body", "stream", "c", "turns", "n", "p50 ms", "p99 ms",
            "baseline p50 ms", "added p50 ms", "added p99 ms", "req/s", "errors")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        lines.append("| " + " | ".join(_cell(v) for v in (
            r["target"], r["body"], r["stream"], r["concurrency"], r["turns"], r["n"],
            r["p50_ms"], r["p99_ms"], r["baseline_p50_ms"], r["added_p50_ms"],
            r["added_p99_ms"], r["rps"], r["errors"])) + " |")
    return "\n".join(lines)


def targets_table(targets: Sequence[dict[str, Any]]) -> str:
    lines = ["| target | limit | measured | met |", "|---|---|---:|---|"]
    for t in targets:
        unit = "×" if "×" in t["limit"] else " ms"
        measured = "not measured" if t["measured"] is None else f"{t['measured']:.2f}{unit}"
        met = "–" if t["met"] is None else ("**met**" if t["met"] else "not met")
        lines.append(f"| {t['goal']} | {t['limit']} | {measured} | {met} |")
    return "\n".join(lines)


def _placement(meta: dict[str, Any]) -> list[str]:
    pin = meta["pinning"]
    if not pin["used"]:
        head = "No pinning: every process may run on every core."
    else:
        store = ("the load core (beside the load generator and the fake upstream; the server "
                 "core is the server under test's alone)" if pin["store_core"] == pin["load_core"]
                 else "the server core (it shares the gateway's core)")
        head = (f"Server under test on core {pin['server_core']} (the gateway and LiteLLM's proxy "
                f"both live there; only one is sent requests at a time); load generator and fake "
                f"upstream on core {pin['load_core']}; the gateway's embedded store (Valkey) on "
                f"{store}.")
    lines = [head, "", "| process | cores | command |", "|---|---|---|"]
    for p in meta.get("placement", []):
        lines.append(f"| {p['role']} (pid {p['pid']}) | {','.join(map(str, p['cpus'])) or '–'} "
                     f"| `{p['command']}` |")
    return lines


def _bodies(meta: dict[str, Any]) -> list[str]:
    lines = ["| turns | stored messages | body a client sends (full) | forwarded by the gateway |",
             "|---:|---:|---:|---:|"]
    for c in meta.get("conversations", {}).values():
        full, fwd = c["full_body"], c["forwarded_body"]
        lines.append(f"| {c['turns']} | {c['stored_messages']} | {full['tokens']:,} tokens, "
                     f"{full['bytes']:,} B, {full['messages']} messages | {fwd['tokens']:,} "
                     f"tokens, {fwd['bytes']:,} B, {fwd['messages']} messages |")
    return lines


def markdown(meta: dict[str, Any], results: Sequence[Row],
             targets: Sequence[dict[str, Any]]) -> str:
    m, src = meta["machine"], meta.get("source", {})
    parts = [
        "# Gateway overhead, like for like: direct, gateway, LiteLLM's proxy",
        "",
        f"{meta['started']}, {meta['duration_s']:.0f} s. {m['cores']} cores ({m['cpu_model']}), "
        f"Python {m['python']}, {m['platform']}. gateway {meta['versions']['gateway']} "
        f"(`{src.get('branch', '?')}` {str(src.get('commit', '?'))[:10]}"
        f"{', with uncommitted changes' if src.get('uncommitted_changes') else ''}; litellm "
        f"{meta['versions']['litellm']} in it), LiteLLM's proxy "
        f"{meta['versions'].get('litellm_proxy', '?')}. {meta['workers']} worker(s) each for "
        "the gateway and LiteLLM's proxy.",
        "",
        "## Targets (issue 10)",
        "",
        targets_table([t for t in targets if t.get("issue", 10) == 10]),
        "",
        "## Targets (issue 36: ratios of this run's rows)",
        "",
        targets_table([t for t in targets if t.get("issue", 10) == 36]),
        "",
        "## Method",
        "",
        *meta["method"],
        "",
        "Measured requests per target and cell: " + ", ".join(
            f"c={c}: {n} in {meta.get('rounds_per_cell', {}).get(c, meta['rounds'])} round(s)"
            for c, n in meta["requests_per_cell"].items())
        + f"; warm-up {meta['warmup']} (at least c) before each; persistence on: "
        f"{meta.get('persist_requests', '–')} per length after {meta['warmup']} warm-up.",
        "",
        "## Placement",
        "",
        *_placement(meta),
        "",
        "## Request bodies",
        "",
        "Token counts are the gateway's (`x-gateway-tokens-original` / `-forwarded`).",
        "",
        *_bodies(meta),
        "",
    ]
    for turns in dict.fromkeys(r["turns"] for r in results if not r["persist"]):
        parts += [f"## {turns} turns" if turns else "## No history", "",
                  table([r for r in results if r["turns"] == turns and not r["persist"]]), ""]
    persisted = [r for r in results if r["persist"]]
    if persisted:
        parts += ["## With persistence on (each request records its turn)", "",
                  "c=1, non-streaming. A stateless client continues the conversation: each "
                  "request sends the history so far plus a new question, and the turn is "
                  "recorded, so the conversation grows by one turn per request. `turns` is "
                  "its length at the start; the baseline is direct with the forwarded body.", "",
                  table(persisted), ""]
        for turns, p in meta.get("persist", {}).items():
            recorded = "every turn recorded" if p["recorded_every_turn"] else \
                "NOT every turn recorded"
            parts.append(f"- {turns} turns: {p['requests']} requests (warm-up included) → "
                         f"{p['end_messages_stored']} messages stored, {recorded}.")
            if "caught_up_s" in p:
                parts.append(f"  Memory work (turns applied, indexed, summarised) was done "
                             f"{p['caught_up_s']} s after the last persisted request (polled "
                             f"every 0.3 s, idle twice in a row: 0.6 s at the least).")
            cpu = p.get("cpu_ms_per_turn")
            if cpu:
                parts.append(f"  CPU per recorded turn (from /proc, until the worker was idle "
                             f"again): server {cpu['server']} ms, memory worker "
                             f"{cpu['worker']} ms, store {cpu['store']} ms.")
        parts.append("")
    if meta.get("errors"):
        parts += ["## Errors", "", "```", json.dumps(meta["errors"], indent=2), "```", ""]
    return "\n".join(parts)


def plot(results: Sequence[Row], path: Path, meta: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in results if not r["persist"] and r["target"] != "direct"]
    lengths = list(dict.fromkeys(r["turns"] for r in shown)) or [None]
    streams = sorted({r["stream"] for r in shown}) or [False]
    targets = list(dict.fromkeys(r["target"] for r in shown))
    levels = sorted({r["concurrency"] for r in shown})
    fig, axes = plt.subplots(len(lengths), len(streams), squeeze=False,
                             figsize=(6.5 * len(streams), 4.2 * len(lengths)))
    width = 0.8 / max(1, len(targets))
    for row_axes, turns in zip(axes, lengths):
        for ax, stream in zip(row_axes, streams):
            for i, target in enumerate(targets):
                values = []
                for c in levels:
                    match = [r for r in shown if (r["target"], r["stream"], r["concurrency"],
                                                  r["turns"]) == (target, stream, c, turns)]
                    values.append(match[0]["added_p50_ms"] if match and
                                  match[0]["added_p50_ms"] is not None else 0.0)
                xs = [x + (i - (len(targets) - 1) / 2) * width for x in range(len(levels))]
                bars = ax.bar(xs, [max(v, 0.01) for v in values], width, label=target)
                ax.bar_label(bars, labels=[f"{v:.1f}" for v in values], fontsize=6)
            ax.set_xticks(range(len(levels)), [f"c={c}" for c in levels])
            ax.set_yscale("log")
            ax.set_ylabel("added p50 over direct, ms (log)")
            ax.set_title(f"{turns or 0} turns, "
                         + ("streaming (time to first byte)" if stream else "non-streaming"),
                         fontsize=10)
            ax.legend(fontsize=7)
    pin = meta["pinning"]
    fig.suptitle(f"Added latency, same body for every target; {meta['workers']} worker(s), "
                 + ("pinned" if pin["used"] else "unpinned"), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
