"""The speed targets of issues 10 and 36, checked against a run's rows. Pure, no I/O.

All are read from one run with one worker each, non-streaming unless said. Issue 10's, in
milliseconds:
- gateway-memory, c=1: added p50 <= 8 ms and p99 <= 20 ms at 50 turns; p50 <= 10 ms at 300;
- gateway-memory with persistence on, c=1: added p50 <= 12 ms (checked at every length run);
- gateway-passthrough (no conversation id), c=1, the 50-turn body: added p50 <= 2 ms;
- gateway-memory at c=10: req/s >= 2 x litellm-proxy's with the same body (every length);
- gateway-memory streaming, c=1: time to first byte added p50 <= 10 ms (every length).
Issue 36's, as ratios of the same run's rows (so a busy machine moves both sides):
- gateway-memory, c=1: added p50 <= 0.20 x litellm-proxy's (same body) at every length, and at
  each length but the shortest <= 1.3 x its own at the shortest (flat in the history);
- gateway-memory with persistence on, c=1: added p50 <= 1.3 x gateway-memory's, same length;
- gateway-memory streaming, c=1: time to first byte added p50 <= 0.20 x litellm-proxy's;
- gateway-memory-anthropic and -responses, c=1: added p50 <= 1.15 x gateway-memory's;
- gateway-memory at c=10: req/s >= 3 x litellm-proxy's.
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
    metric: Literal["added_p50_ms", "added_p99_ms", "rps_ratio", "added_ratio"]
    limit: float
    stream: bool = False
    concurrency: int = 1
    turns: int | None = 50
    persist: bool = False
    versus: str = "litellm-proxy"
    """rps_ratio, added_ratio: the target whose req/s (added p50) divides this one's."""
    versus_turns: int | None = None
    """added_ratio: the length of the row that divides (None: the same length)."""
    versus_persist: bool = False
    """added_ratio: whether the row that divides is a persistence-on one."""
    issue: int = 10

    @property
    def at_most(self) -> bool:
        return self.metric != "rps_ratio"

    def limit_text(self) -> str:
        if self.metric == "rps_ratio":
            return f"≥ {self.limit:g}× {self.versus}"
        if self.metric == "added_ratio":
            turns = f", {self.versus_turns} turns" if self.versus_turns is not None else ""
            return f"≤ {self.limit:g}× {self.versus}{turns}"
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


def ratio_goals(turns: Sequence[int]) -> list[Goal]:
    """Issue 36's targets for a run over these conversation lengths, as ratios of its rows."""
    lengths = [t for t in turns if t] or [50]
    shortest = min(lengths)
    ratio = dict(metric="added_ratio", issue=36)
    out = [Goal(f"gateway-memory, {t} turns, c=1: added p50 vs litellm-proxy's",
                "gateway-memory", limit=0.20, turns=t, **ratio) for t in lengths]
    out += [Goal(f"gateway-memory, {t} turns, c=1: added p50 vs its own at {shortest} turns",
                 "gateway-memory", limit=1.3, turns=t, versus="gateway-memory",
                 versus_turns=shortest, **ratio) for t in lengths if t != shortest]
    out += [Goal(f"gateway-memory, persistence on, {t} turns, c=1: added p50 vs persistence off",
                 "gateway-memory", limit=1.3, turns=t, persist=True, versus="gateway-memory",
                 **ratio) for t in lengths]
    out += [Goal(f"gateway-memory streaming, {t} turns, c=1: added time to first byte p50 vs "
                 "litellm-proxy's", "gateway-memory", limit=0.20, stream=True, turns=t, **ratio)
            for t in lengths]
    out += [Goal(f"{door}, {t} turns, c=1: added p50 vs the chat door", door, limit=1.15,
                 turns=t, versus="gateway-memory", **ratio)
            for door in ("gateway-memory-anthropic", "gateway-memory-responses")
            for t in lengths]
    out += [Goal(f"gateway-memory, {t} turns, c=10: req/s vs litellm-proxy (same body)",
                 "gateway-memory", "rps_ratio", 3, concurrency=10, turns=t, issue=36)
            for t in lengths]
    return out


def check(goals_: Sequence[Goal], rows: Sequence[Row]) -> list[dict[str, Any]]:
    """One result per goal: {goal, limit, measured, met}; measured/met None if not measured."""
    return [_check(goal, rows) for goal in goals_]


def _find(rows: Sequence[Row], goal: Goal, target: str, *, turns: int | None = None,
          persist: bool | None = None) -> Row | None:
    """The row of `target` in the goal's cell (`turns`, `persist`: another length, or
    persistence, than the goal's)."""
    turns = goal.turns if turns is None else turns
    persist = goal.persist if persist is None else persist
    for r in rows:
        if (r["target"], r["stream"], r["concurrency"], r["turns"], r["persist"]) == (
                target, goal.stream, goal.concurrency, turns, persist) and r["n"]:
            return r
    return None


def _check(goal: Goal, rows: Sequence[Row]) -> dict[str, Any]:
    measured: float | None = None
    mine = _find(rows, goal, goal.target)
    if goal.metric == "rps_ratio":
        other = _find(rows, goal, goal.versus)
        if mine and other and mine["rps"] and other["rps"]:
            measured = round(mine["rps"] / other["rps"], 2)
    elif goal.metric == "added_ratio":
        other = _find(rows, goal, goal.versus, turns=goal.versus_turns,
                      persist=goal.versus_persist)
        if mine and other and other["added_p50_ms"] > 0:
            measured = round(mine["added_p50_ms"] / other["added_p50_ms"], 2)
    elif mine is not None:
        measured = mine[goal.metric]
    met = None if measured is None else (
        measured <= goal.limit if goal.at_most else measured >= goal.limit)
    return {"goal": goal.label, "limit": goal.limit_text(), "measured": measured, "met": met,
            "issue": goal.issue}
