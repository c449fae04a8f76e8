"""`bench agent`'s summary of a session and its markdown report."""

from __future__ import annotations

from typing import Any, Sequence

from bench.agent.cost import RULE_NAMES
from bench.agent.drive import Step


def summary(steps: Sequence[Step]) -> dict[str, Any]:
    """A session's counts (requests that broke a target) and means."""
    forwarded = [s for s in steps if s.forwarded_tokens is not None]
    reuse = [s.reuse for s in steps if s.reuse is not None]
    priced = [s for s in steps if s.cost]
    last = steps[-1] if steps else None
    out: dict[str, Any] = {
        "requests": len(steps),
        "rejected": sum(s.rejected for s in steps),
        "client_errors": sum(s.status is None for s in steps),
        "upstream_rejected": sum((s.upstream_status or 200) != 200 for s in steps),
        "not_forwarded": sum(s.forwarded_count == 0 for s in steps),
        "task_missing": sum(s.task_kept is False for s in steps),
        "instruction_missing": sum(s.instruction_kept is False for s in steps),
        "newest_result_cut": sum(s.results_whole is False for s in steps),
        "over_budget": sum(s.over_budget for s in steps),
        "over_budget_newest_fits": sum(s.over_budget and s.essential_tokens <= s.budget
                                       for s in steps),
        "past_twice_not_compacted": sum(s.original_tokens > 2 * s.budget and not s.compacted
                                        for s in forwarded),
        "compacted": sum(s.compacted for s in forwarded),
        "no_breakpoint_in_messages": sum(s.breakpoints_in_messages == 0 for s in forwarded),
        "max_breakpoints": max((s.breakpoints for s in forwarded), default=0),
        "prefix_reuse": sum(reuse) / len(reuse) if reuse else None,
        "last_original_tokens": last.original_tokens if last else 0,
        "last_forwarded_tokens": last.forwarded_tokens if last else None,
        "cost_ratio": {rule: _ratio(sum(s.cost[rule] for s in priced),
                                    sum(s.whole_cost[rule] for s in priced))
                       for rule in RULE_NAMES},
    }
    return out


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def _f(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


COLUMNS = (("requests", "requests"), ("rejected", "rejected"),
           ("client_errors", "client errors"), ("upstream_rejected", "refused by the fake"),
           ("task_missing", "task missing"), ("instruction_missing", "instruction missing"),
           ("newest_result_cut", "newest result cut"), ("over_budget", "over budget"),
           ("over_budget_newest_fits", "over budget, newest fits"),
           ("past_twice_not_compacted", "past 2× budget, not compacted"),
           ("no_breakpoint_in_messages", "no breakpoint in messages"),
           ("max_breakpoints", "max breakpoints"), ("prefix_reuse", "prefix reuse"))


def markdown(result: dict[str, Any]) -> str:
    meta = result["meta"]
    lines = [f"# bench agent — {meta['label']}", "",
             f"- date: {meta['date']}", f"- commit: {meta['commit']}"
             + (" (uncommitted changes)" if meta.get("uncommitted_changes") else ""),
             f"- command: `{meta['command']}`",
             f"- machine: {meta['machine']['cores']} cores, {meta['machine']['cpu_model']}, "
             f"Python {meta['machine']['python']}",
             f"- sessions: {meta['sessions']} (seconds: {meta['seconds']:.0f})", "",
             "Counts are requests of the session; budget = window − the completion's reserve "
             "(gateway tokens, cl100k); cost = the session's input cost with the gateway / the "
             "client's whole history with its own caching.", ""]
    head = ["dialect", "window", "stream"] + [name for _, name in COLUMNS] + [
        "forwarded / original (last)"] + [f"cost {rule}" for rule in RULE_NAMES]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run in result["runs"]:
        s = run["summary"]
        row = [run["dialect"], _f(run["window"] or "default"), "yes" if run["stream"] else "no"]
        row += [_f(s[key]) for key, _ in COLUMNS]
        row.append(f"{_f(s['last_forwarded_tokens'])} / {_f(s['last_original_tokens'])}")
        row += [_f(s["cost_ratio"][rule]) for rule in RULE_NAMES]
        lines.append("| " + " | ".join(row) + " |")
    errors = [(run, e) for run in result["runs"] for e in run["errors"]]
    if errors:
        lines += ["", "## What the client got (first error of each kind per session)", ""]
        for run, error in errors:
            lines.append(f"- {run['dialect']} {_f(run['window'] or 'default')}"
                         f"{' stream' if run['stream'] else ''}, {run['steps']} steps: "
                         f"{error['count']}×, first at "
                         f"step {error['first_step']}: `{error['error']}`")
    return "\n".join(lines) + "\n"


def first_errors(steps: Sequence[Step]) -> list[dict[str, Any]]:
    """Each distinct error kind (its first 120 characters) once, with its count."""
    kinds: dict[str, dict[str, Any]] = {}
    for s in steps:
        if s.error:
            key = s.error[:120]
            kind = kinds.setdefault(key, {"error": s.error, "first_step": s.step, "count": 0})
            kind["count"] += 1
    return list(kinds.values())
