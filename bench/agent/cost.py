"""What each request of an agent session costs under the four cache price rules of
bench/locomo/billing.py (openai-0.25, openai-0.1, anthropic, deepseek), in uncached-input-token
units, each request billed against the one before it in the same session.

Two prompts per step: the one the gateway forwarded, and the client's own whole history (what
it sends without the gateway, with its own caching). Breakpoints, for the `anthropic` rule:
- the client's whole history marks its end (Claude Code's breakpoint on the newest block):
  billing's default (None);
- a forwarded Messages request is cached up to its last marked unit (written at 1.25×); the
  next request reads the longest earlier marked prefix it repeats whole (Anthropic looks a
  breakpoint up by its prefix). A request without marks writes and reads nothing;
- a forwarded chat request has no marks: billed as if marked at its end, like the baseline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from bench.locomo.billing import RULES, split
from bench.locomo.meter import PromptMeter

Units = Sequence[dict[str, str]]


@dataclass(frozen=True, slots=True)
class Priced:
    """One prompt as billing sees it: its units, and the token offsets its marks end at
    (None: marked at its end)."""

    units: Units
    marks: tuple[int, ...] | None = None


def priced(meter: PromptMeter, units: Units, marked: Sequence[int] | None) -> Priced:
    """`units` with marks at the end of the units indexed by `marked` (None: at its end)."""
    if marked is None:
        return Priced(units)
    ends, total = [], 0
    for i, unit in enumerate(units):
        total += len(meter.rendered(unit))
        if i in marked:
            ends.append(total)
    return Priced(units, tuple(ends))


def step_cost(meter: PromptMeter, previous: Priced | None, current: Priced
              ) -> dict[str, float]:
    """`current`'s cost under every rule, sent right after `previous` (None: the first)."""
    total = sum(len(meter.rendered(u)) for u in current.units)
    if previous is None:
        shared, previous_total = 0, None
    else:
        shared, previous_total, total = meter.shared_prefix(previous.units, current.units)
    previous_mark = None
    if previous is not None and previous.marks is not None:
        previous_mark = max((m for m in previous.marks if m <= shared), default=0)
    mark = None if current.marks is None else max(current.marks, default=0)
    return {rule.name: split(rule, shared, previous_total, total, previous_mark,
                             mark).units(rule) for rule in RULES}


RULE_NAMES = tuple(rule.name for rule in RULES)
