"""What the requests of one assembly at one budget cost, request by request.

Each request is billed against the request before it in the same conversation thread (a
provider's cache holds a prompt for minutes; a replay sends the next one at once), under each
provider's caching mechanics (pricing.MECHANICS), in tokens: cached, written, plain. Prices
are applied per model afterwards (rows.py). Only the tokens of the previous prompt of each
thread are kept, so a 300k-token history replayed whole stays small in memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import fmean
from typing import Mapping, Sequence

from bench.cost.pricing import MECHANICS
from bench.locomo.billing import Billed, bill_tokens
from bench.locomo.meter import PromptMeter

Message = Mapping[str, object]
PROVIDERS = tuple(MECHANICS)


@dataclass(slots=True)
class Billing:
    """One billed request."""

    request: tuple[str, int]
    """(thread, turn): the same request of every assembly."""
    history_tokens: int
    """What the client's whole prompt (its history and the new message) counts."""
    forwarded: int
    """The prompt sent upstream, counted as the gateway counts (`PromptMeter.tokens`)."""
    rendered: int
    """The same in billing.py's unit (each message rendered in a chat template)."""
    recent_turns: int
    """User messages of history in the prompt, the new one not counted."""
    billed: dict[str, Billed]
    """Provider → the prompt's cached / written / plain tokens."""


@dataclass(slots=True)
class Tally:
    """The billed requests of one (data, assembly, budget), and their prefix reuse."""

    meter: PromptMeter
    requests: list[Billing] = field(default_factory=list)
    reuse: list[float] = field(default_factory=list)
    """Per consecutive pair of one thread's prompts: the share of the later one's tokens that
    repeat a prefix of the earlier one's."""
    _previous: dict[str, tuple[list[Message], int | None]] = field(default_factory=dict)

    def add(self, thread: str, turn: int, prompt: Sequence[Message], stable: int | None,
            history_tokens: int) -> None:
        """The next request of `thread` (in order; `turn`: its user message's index in the
        thread's transcript). `stable`: the leading messages the gateway marked as its stable
        prefix (None: the client's mark at the end)."""
        prompt = list(prompt)
        previous, previous_stable = self._previous.get(thread, (None, None))
        self._previous[thread] = (prompt, stable)
        tokens = bill_tokens(self.meter, previous, prompt, previous_stable, stable,
                             [MECHANICS[p] for p in PROVIDERS])
        if previous is not None:
            self.reuse.append(self.meter.prefix_reuse(previous, prompt))
        self.requests.append(Billing(
            request=(thread, turn), history_tokens=history_tokens,
            forwarded=self.meter.tokens(prompt),
            rendered=sum(len(self.meter.rendered(m)) for m in prompt),
            recent_turns=sum(1 for m in prompt[:-1] if m.get("role") == "user"),
            billed=dict(zip(PROVIDERS, tokens))))

    def mean(self, attribute: str) -> float | None:
        values = [getattr(r, attribute) for r in self.requests]
        return round(fmean(values), 1) if values else None

    def prefix_reuse(self) -> float | None:
        return round(fmean(self.reuse), 4) if self.reuse else None

    def cached_share(self, provider: str) -> float | None:
        total = sum(r.rendered for r in self.requests)
        cached = sum(r.billed[provider].cached for r in self.requests)
        return round(cached / total, 4) if total else None
