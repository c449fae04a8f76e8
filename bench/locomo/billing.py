"""What a replayed request costs under a provider's prompt-cache rules, in input-token units.

Each request is billed against the request before it in the same conversation (a provider's
cache holds it for minutes; a replay sends the next one at once). Prices are multiples of the
model's uncached input price, so a cost of 1,000 is what 1,000 uncached input tokens cost;
output tokens are left out (the same reply whatever the assembly). The rules, as the providers
document them:
- `openai-0.25` / `openai-0.1`: automatic caching of the longest prefix shared with a recent
  prompt, for prompts of at least 1,024 tokens, in steps of 128 tokens after the first 1,024;
  cached tokens cost 0.25× (e.g. gpt-4.1) or 0.1× (e.g. gpt-5) of the input price;
- `anthropic`: explicit breakpoints. A client marks the end of each prompt (`cache_control`
  on its last message), so a request writes its whole prompt to the cache at 1.25× and the
  next request reads it at 0.1× — but only if that whole earlier prompt is a prefix of the new
  one (a breakpoint caches its prefix exactly, nothing shorter); prompts under 1,024 tokens
  are not cached at all. The gateway marks the end of its prompt's stable prefix instead
  (`x-gateway-stable-messages`; gateway/core/context/cache_hints.py): what comes before the
  mark is written at 1.25× and read back by the next request if it repeats it, what follows
  is paid at 1× (its mark after the system prompts is left out: it caches less);
- `deepseek`: automatic caching in 64-token units of the longest shared prefix, hits at 0.1×.
The rendering of a prompt into tokens is the meter's (`PromptMeter.shared_prefix`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from bench.locomo.meter import Prompt, PromptMeter


@dataclass(frozen=True, slots=True)
class CacheRule:
    name: str
    read: float
    """Price of a cached input token, as a multiple of the uncached price."""
    min_tokens: int
    """Prompts shorter than this are never cached."""
    step: int
    """Cached prefixes are counted in multiples of this many tokens (after `min_tokens`)."""
    write: float = 1.0
    """Price of an input token written to the cache (Anthropic's 1.25×), else 1.0."""
    whole_prefix_only: bool = False
    """Only a previous prompt that is wholly a prefix of this one is read (a breakpoint)."""


RULES = (
    CacheRule("openai-0.25", read=0.25, min_tokens=1024, step=128),
    CacheRule("openai-0.1", read=0.1, min_tokens=1024, step=128),
    CacheRule("anthropic", read=0.1, min_tokens=1024, step=1, write=1.25,
              whole_prefix_only=True),
    CacheRule("deepseek", read=0.1, min_tokens=64, step=64),
)


def cached_tokens(rule: CacheRule, shared: int, previous_total: int | None,
                  total: int) -> int:
    """Tokens of this prompt the provider bills as cache reads: `shared` leading tokens equal
    the previous prompt's (`previous_total` tokens long, or for a rule with breakpoints the
    previous prompt's marked prefix; None for a conversation's first)."""
    if previous_total is None or total < rule.min_tokens or previous_total < rule.min_tokens \
            or shared < rule.min_tokens:
        return 0
    if rule.whole_prefix_only:
        return previous_total if shared >= previous_total else 0
    return rule.min_tokens + (shared - rule.min_tokens) // rule.step * rule.step


@dataclass(frozen=True, slots=True)
class Billed:
    """A prompt's tokens as the provider bills them: read from its cache, written to it, and
    plain (uncached) input; they add up to the prompt."""

    cached: int
    written: int
    plain: int

    def units(self, rule: CacheRule) -> float:
        """What these tokens cost under `rule`, in uncached-input-token units."""
        return self.cached * rule.read + self.written * rule.write + self.plain


def split(rule: CacheRule, shared: int, previous_total: int | None, total: int,
          previous_mark: int | None = None, mark: int | None = None) -> Billed:
    """How `rule` bills a prompt of `total` tokens sharing `shared` leading tokens with the one
    before. `previous_mark`, `mark`: where the previous prompt's and this prompt's breakpoints
    are (tokens), for a rule with breakpoints; None: at the prompt's end."""
    if rule.whole_prefix_only and previous_mark is not None and previous_total is not None:
        previous_total = min(previous_mark, previous_total)
    cached = cached_tokens(rule, shared, previous_total, total)
    written = total if mark is None else min(mark, total)
    writes = max(0, written - cached) if rule.write != 1.0 and written >= rule.min_tokens \
        else 0
    return Billed(cached, writes, total - cached - writes)


def cost(rule: CacheRule, shared: int, previous_total: int | None, total: int,
         previous_mark: int | None = None, mark: int | None = None) -> float:
    """The request's input cost in uncached-token units under `rule` (`split`'s arguments)."""
    return split(rule, shared, previous_total, total, previous_mark, mark).units(rule)


def bill(meter: PromptMeter, previous: Prompt | None, current: Prompt,
         previous_stable: int | None = None, stable: int | None = None) -> dict[str, float]:
    """`current`'s cost under every rule, sent right after `previous` (None: the first).
    `previous_stable`, `stable`: how many leading messages of each the gateway marked as the
    stable prefix (its cache breakpoint); None: the client's mark at the prompt's end."""
    return {rule.name: b.units(rule)
            for rule, b in zip(RULES, bill_tokens(meter, previous, current, previous_stable,
                                                  stable, RULES))}


def bill_tokens(meter: PromptMeter, previous: Prompt | None, current: Prompt,
                previous_stable: int | None, stable: int | None,
                rules: Sequence[CacheRule]) -> list[Billed]:
    """`bill`'s tokens, cached / written / plain, under each of `rules`."""
    if previous is None:
        shared, previous_total, total = 0, None, sum(len(meter.rendered(m)) for m in current)
    else:
        shared, previous_total, total = meter.shared_prefix(previous, current)
    previous_mark = _tokens(meter, previous[:previous_stable]) \
        if previous is not None and previous_stable is not None else None
    mark = _tokens(meter, current[:stable]) if stable is not None else None
    return [split(rule, shared, previous_total, total, previous_mark, mark) for rule in rules]


def _tokens(meter: PromptMeter, messages: Prompt) -> int:
    return sum(len(meter.rendered(m)) for m in messages)
