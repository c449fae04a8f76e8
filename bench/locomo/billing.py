"""What a replayed request costs under a provider's prompt-cache rules, in input-token units.

Each request is billed against the request before it in the same conversation (a provider's
cache holds it for minutes; a replay sends the next one at once). Prices are multiples of the
model's uncached input price, so a cost of 1,000 is what 1,000 uncached input tokens cost;
output tokens are left out (the same reply whatever the assembly). The rules, as the providers
document them:
- `openai-0.25` / `openai-0.1`: automatic caching of the longest prefix shared with a recent
  prompt, for prompts of at least 1,024 tokens, in steps of 128 tokens after the first 1,024;
  cached tokens cost 0.25× (e.g. gpt-4.1) or 0.1× (e.g. gpt-5) of the input price;
- `anthropic`: explicit breakpoints. The client (or gateway) marks the end of each prompt
  (`cache_control` on its last message), so a request writes its whole prompt to the cache at
  1.25× and the next request reads it at 0.1× — but only if that whole earlier prompt is a
  prefix of the new one (a breakpoint caches its prefix exactly, nothing shorter); prompts under
  1,024 tokens are not cached at all;
- `deepseek`: automatic caching in 64-token units of the longest shared prefix, hits at 0.1×.
The rendering of a prompt into tokens is the meter's (`PromptMeter.shared_prefix`).
"""

from __future__ import annotations

from dataclasses import dataclass

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
    the previous prompt's (`previous_total` tokens long; None for a conversation's first)."""
    if previous_total is None or total < rule.min_tokens or shared < rule.min_tokens:
        return 0
    if rule.whole_prefix_only:
        return previous_total if shared == previous_total else 0
    return rule.min_tokens + (shared - rule.min_tokens) // rule.step * rule.step


def cost(rule: CacheRule, shared: int, previous_total: int | None, total: int) -> float:
    """The request's input cost in uncached-token units under `rule`."""
    cached = cached_tokens(rule, shared, previous_total, total)
    rest = total - cached
    writes = rest if rule.write != 1.0 and total >= rule.min_tokens else 0
    return cached * rule.read + writes * rule.write + (rest - writes)


def bill(meter: PromptMeter, previous: Prompt | None, current: Prompt) -> dict[str, float]:
    """`current`'s cost under every rule, sent right after `previous` (None: the first)."""
    if previous is None:
        shared, previous_total, total = 0, None, sum(len(meter.rendered(m)) for m in current)
    else:
        shared, previous_total, total = meter.shared_prefix(previous, current)
    return {rule.name: cost(rule, shared, previous_total, total) for rule in RULES}
