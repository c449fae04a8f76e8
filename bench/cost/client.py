"""What a client without the gateway sends: the two assemblies the cost benchmark compares the
gateway with, built from the client's own history (no gateway call).

- `whole`: the whole history and the new message, every request (the baseline: with the
  provider's prompt cache on, only what is new is paid in full);
- `truncate`: the newest whole messages that fit the prompt budget, cut in steps so that
  consecutive prompts share their prefix: the history's start stays where it is while the
  prompt fits, and when it no longer does it moves forward to where the prompt is at most
  `STEP` of the budget (at a user message where one allows it), then stays again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from bench.locomo.meter import PromptMeter

Message = Mapping[str, object]
Prompt = list[Message]
STEP = 0.5
"""After a cut, the truncated prompt holds at most this share of the budget."""


@dataclass(slots=True)
class SteppedTruncation:
    """The `truncate` client's state over one conversation: where its history starts."""

    budget: int
    meter: PromptMeter
    start: int = 0

    def prompt(self, history: Sequence[Message], current: Message, *,
               keep: bool = True) -> Prompt:
        """The prompt for `current` after `history` (which only ever grows between calls).
        `keep=False`: a probe, which does not move the start for the requests after it.
        Invariant: meter.tokens(result) <= budget unless `current` alone exceeds it."""
        start = self.start
        if self.meter.tokens([*history[start:], current]) > self.budget:
            start = self._cut(history, current, start)
        if keep:
            self.start = start
        return [*history[start:], current]

    def _cut(self, history: Sequence[Message], current: Message, start: int) -> int:
        target = int(self.budget * STEP)
        used = self.meter.tokens([current])
        fits = len(history)  # the oldest start whose prompt fits the budget
        best = None  # the oldest start whose prompt fits `target`
        for i in range(len(history) - 1, start - 1, -1):
            used += self.meter.message_tokens(history[i])
            if used > self.budget:
                break
            fits = i
            if used <= target:
                best = i
        chosen = best if best is not None else fits
        # Prefer a start at a user message (a prompt that opens with a reply reads oddly),
        # moving forward, never past the end.
        for i in range(chosen, len(history)):
            if history[i].get("role") == "user":
                return i
        return chosen



def whole(history: Sequence[Message], current: Message) -> Prompt:
    return [*history, current]
