"""Where the verbatim window of a stepped assembly starts: a start that moves only in steps.

A provider caches the longest prefix a prompt shares with a recent one (OpenAI, DeepSeek,
Gemini automatically; Anthropic up to a breakpoint). A recent window that slides by one
exchange per request shares nothing with the previous prompt past the blocks before it, so an
over-budget conversation pays full price for every token of every request. A window whose
start stays put is append-only: the next request repeats this one's prefix and adds the new
exchange after it, and only what follows the window (the recall tail, the current message) is
new.

Step points are user-turn starts fixed by the history alone: walking it from its start, the
next point is the first turn that starts at least `step` tokens after the last point. Appending
to a conversation never moves an earlier point, so the window — from the earliest point after
which the history costs at most `allowance` — stays where it is until the history since it
outgrows the allowance, then jumps ahead by at least a step. Between jumps the window holds
between `allowance - step` and `allowance` tokens.

Costs here are the bookkeeping's `estimated_costs`: each message at most `length` tokens (a
message longer than that is forwarded shortened to it) plus a frame — an estimate, so the
points do not depend on how a tokenizer cuts a long text; the rewrite checks the window's true
cost before forwarding it.

Invariants (tests/unit/test_steps.py): pure and deterministic; the window's start (the first of
`window_starts`) of a history stays its start for every extension of that history until the
extension's cost since it exceeds `allowance`; it never moves backwards as the history grows;
it is a user message.
"""

from __future__ import annotations

from itertools import accumulate
from typing import Iterator, Sequence

from gateway.core.messages import Message

SHORTENED_FRAME = 16
"""Tokens a shortened message may cost beyond its length: the role's framing and the mark."""


def estimated_costs(costs: Sequence[int], length: int) -> tuple[int, ...]:
    """Each message's cost as the window would forward it, at most `length` plus the frame."""
    cap = length + SHORTENED_FRAME
    return tuple(min(c, cap) for c in costs)


def step_points(history: Sequence[Message], costs: Sequence[int], step: int) -> tuple[int, ...]:
    """The indexes of the user messages where a window may start (see the module docstring):
    the first user message, then each first one at least `step` tokens after the last point."""
    totals = (0, *accumulate(costs))
    points: list[int] = []
    for i, message in enumerate(history):
        if message.role != "user":
            continue
        if not points or totals[i] - totals[points[-1]] >= step:
            points.append(i)
    return tuple(points)


def window_starts(history: Sequence[Message], costs: Sequence[int], allowance: int, step: int,
                  earliest: int = 0) -> Iterator[int]:
    """The step points at or after `earliest` from which the rest of the history costs at most
    `allowance`, oldest first: the first is where the window starts (the caller checks its
    true cost and may take a later one); none when not even the newest point's rest fits."""
    total = sum(costs)
    totals = (0, *accumulate(costs))
    for point in step_points(history, costs, max(1, step)):
        if point >= earliest and total - totals[point] <= allowance:
            yield point
