"""The speed targets of issue 10, checked against a run's rows. Pure, no I/O.

All are read from one run with one worker each, non-streaming unless said:
- gateway-memory, c=1: added p50 <= 8 ms and p99 <= 20 ms at 50 turns; p50 <= 10 ms at 300;
- gateway-memory with persistence on, c=1: added p50 <= 12 ms (checked at every length run);
- gateway-passthrough (no conversation id), c=1, the 50-turn body: added p50 <= 2 ms;
- gateway-memory at c=10: req/s >= 2 x litellm-proxy's with the same body (every length);
- gateway-memory streaming, c=1: time to first byte added p50 <= 10 ms (every length).
A target whose row is missing (not measured, or no successful request) is "not measured".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Sequence

from bench.overhead.stats import Row


@dataclass(frozen=True)
class Goal:
    label: str
    target: str
    metric: Literal["added_p50_ms", "added_p99_ms", "rps_ratio"]
    limit: float
    stream: bool = False
    concurrency: int = 1
    turns: int | None = 50
    persist: bool = False
    versus: str = "litellm-proxy"
    """rps_ratio only: the target whose req/s divides this one's."""

    @property
    def at_most(self) -> bool:
        return self.metric != "rps_ratio"

    def limit_text(self) -> str:
        if self.metric == "rps_ratio":
            return f"≥ {self.limit:g}× {self.versus}"
        return f"≤ {self.limit:g} ms"


def goals(turns: Sequence[int]) -> list[Goal]:
    """The targets for a run over these conversation lengths (fixed ones even if not run)."""
    out = [
        Goal("gateway-memory, 50 turns, c=1: added p50", "gateway-memory", "added_p50_ms", 8),
        Goal("gateway-memory, 50 turns, c=1: added p99", "gateway-memory", "added_p99_ms", 20),
        Goal("gateway-memory, 300 turns, c=1: added p50", "gateway-memory", "added_p50_ms", 10,
             turns=300),
    ]
    lengths = [t for t in turns if t] or [50]
    out += [Goal(f"gateway-memory, persistence on, {t} turns, c=1: added p50",
                 "gateway-memory", "added_p50_ms", 12, turns=t, persist=True) for t in lengths]
    out.append(Goal("gateway-passthrough (no conversation id), 50-turn body, c=1: added p50",
                    "gateway-passthrough", "added_p50_ms", 2))
    out += [Goal(f"gateway-memory, {t} turns, c=10: req/s vs litellm-proxy (same body)",
                 "gateway-memory", "rps_ratio", 2, concurrency=10, turns=t) for t in lengths]
    out += [Goal(f"gateway-memory streaming, {t} turns, c=1: added time to first byte p50",
                 "gateway-memory", "added_p50_ms", 10, stream=True, turns=t) for t in lengths]
    return out


def check(goals_: Sequence[Goal], rows: Sequence[Row]) -> list[dict[str, Any]]:
    """One result per goal: {goal, limit, measured, met}; measured/met None if not measured."""
    return [_check(goal, rows) for goal in goals_]


def _find(rows: Sequence[Row], goal: Goal, target: str) -> Row | None:
    for r in rows:
        if (r["target"], r["stream"], r["concurrency"], r["turns"], r["persist"]) == (
                target, goal.stream, goal.concurrency, goal.turns, goal.persist) and r["n"]:
            return r
    return None


def _check(goal: Goal, rows: Sequence[Row]) -> dict[str, Any]:
    measured: float | None = None
    mine = _find(rows, goal, goal.target)
    if goal.metric == "rps_ratio":
        other = _find(rows, goal, goal.versus)
        if mine and other and mine["rps"] and other["rps"]:
            measured = round(mine["rps"] / other["rps"], 2)
    elif mine is not None:
        measured = mine[goal.metric]
    met = None if measured is None else (
        measured <= goal.limit if goal.at_most else measured >= goal.limit)
    return {"goal": goal.label, "limit": goal.limit_text(), "measured": measured, "met": met}
