"""The baselines, computed by the harness from the client's full history (no gateway call).

Each returns the prompt the client would send: some of `history` followed by `current` (the
new user message or the probe question), which is always sent.
- `full`: the whole history;
- `last_n`: the last `n` messages (10 rounds = 20 messages by default);
- `truncate`: the newest whole messages that fit the prompt budget with `current`
  (a contiguous suffix of history; stops at the first message that does not fit).
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from bench.locomo.meter import PromptMeter

Message = Mapping[str, object]
LAST_N_MESSAGES = 20


def full(history: Sequence[Message], current: Message) -> list[Message]:
    return [*history, current]


def last_n(history: Sequence[Message], current: Message,
           n: int = LAST_N_MESSAGES) -> list[Message]:
    return [*history[max(0, len(history) - n):], current]


def truncate(history: Sequence[Message], current: Message, budget: int,
             meter: PromptMeter) -> list[Message]:
    """Invariant: meter.tokens(result) <= budget unless `current` alone exceeds it."""
    used = meter.tokens([current])
    start = len(history)
    while start > 0:
        cost = meter.message_tokens(history[start - 1])
        if used + cost > budget:
            break
        used += cost
        start -= 1
    return [*history[start:], current]


Baseline = Callable[[Sequence[Message], Message], list[Message]]


def baselines(budgets: Sequence[int], meter: PromptMeter
              ) -> dict[tuple[str, int | None], Baseline]:
    """Every baseline by (strategy, budget): budget None for the budget-independent ones."""
    out: dict[tuple[str, int | None], Baseline] = {("full", None): full, ("last-n", None): last_n}
    for budget in budgets:
        out[("truncate", budget)] = (
            lambda history, current, b=budget: truncate(history, current, b, meter))
    return out
