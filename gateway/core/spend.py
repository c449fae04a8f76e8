"""What one request cost: the upstream's `usage` read, priced, and set beside what the whole
(unrewritten) history would have cost at the same prices.

Pure: data in, data out. Money is counted in whole **nano-units** of the price table's
currency (1e-9; litellm's table is in US dollars), computed exactly with `Decimal` and rounded
once per request, so counters add up as integers and a cost is exact to the price table.

The whole-history estimate (documented in docs/operating.md#usage-and-spend): the original
prompt is the upstream's prompt tokens plus what the rewrite left out (the gateway's own
counts, original minus forwarded); of it, as many tokens are taken as read from the
provider's cache (and as written to it) as the forwarded prompt had, capped at its length.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any, Mapping

NANO = 10 ** 9
"""Money counters are integers of 1e-9 of the currency."""
_MILLION = Decimal(10 ** 6)


@dataclass(frozen=True, slots=True)
class Price:
    """Prices per token, in the table's currency. `cached_input`: a prompt token read from the
    provider's cache; `cache_write`: one written to it (Anthropic's cache creation)."""

    input: Decimal
    output: Decimal
    cached_input: Decimal
    cache_write: Decimal

    @classmethod
    def per_million(cls, input: float, output: float, cached_input: float | None = None,
                    cache_write_input: float | None = None) -> Price:
        """From prices per million tokens (the config's form); cached and cache-write input
        cost as much as input unless given."""
        def per_token(value: float) -> Decimal:
            return Decimal(repr(value)) / _MILLION

        return cls(per_token(input), per_token(output),
                   per_token(input if cached_input is None else cached_input),
                   per_token(input if cache_write_input is None else cache_write_input))


FREE = Price(Decimal(0), Decimal(0), Decimal(0), Decimal(0))


@dataclass(frozen=True, slots=True)
class Usage:
    """The upstream's token usage as the gateway reads it (OpenAI's `usage`, and Anthropic's
    cache figures as litellm reports them). `prompt` includes the cached and cache-written
    tokens (OpenAI counts them in `prompt_tokens`; litellm adds Anthropic's in)."""

    prompt: int
    completion: int
    cached: int = 0
    cache_write: int = 0

    @property
    def uncached(self) -> int:
        return max(self.prompt - self.cached - self.cache_write, 0)


def read_usage(data: Any) -> Usage | None:
    """The usage of an upstream answer (`usage` of a completion or of a stream's last chunk);
    None when it has none or it is not in a shape known here. Cached tokens: OpenAI's
    `prompt_tokens_details.cached_tokens`, else Anthropic's `cache_read_input_tokens` (as
    litellm reports it), else DeepSeek's `prompt_cache_hit_tokens`."""
    if not isinstance(data, Mapping):
        return None
    prompt, completion = _count(data.get("prompt_tokens")), _count(data.get("completion_tokens"))
    if prompt is None or completion is None:
        return None
    details = data.get("prompt_tokens_details")
    details = details if isinstance(details, Mapping) else {}
    cached = _count(details.get("cached_tokens"))
    for name in ("cache_read_input_tokens", "prompt_cache_hit_tokens"):  # Anthropic, DeepSeek
        if cached is None:
            cached = _count(data.get(name))
    write = _count(data.get("cache_creation_input_tokens"))
    if write is None:
        write = _count(details.get("cache_creation_tokens"))
    cached = min(cached or 0, prompt)
    return Usage(prompt, completion, cached, min(write or 0, prompt - cached))


def cost(usage: Usage, price: Price) -> int:
    """What `usage` costs at `price`, in nano-units."""
    total = (usage.uncached * price.input + usage.cached * price.cached_input
             + usage.cache_write * price.cache_write + usage.completion * price.output)
    return int((total * NANO).to_integral_value(ROUND_HALF_EVEN))


def whole_history_usage(usage: Usage, tokens_original: int | None,
                        tokens_forwarded: int | None) -> Usage:
    """The usage the client's own (unrewritten) request would have had: its prompt longer by
    what the rewrite left out, the same number of tokens read from (and written to) the
    provider's cache, capped at the prompt's length; the same completion."""
    left_out = max((tokens_original or 0) - (tokens_forwarded or 0), 0) \
        if tokens_original is not None and tokens_forwarded is not None else 0
    prompt = usage.prompt + left_out
    cached = min(usage.cached, prompt)
    return Usage(prompt, usage.completion, cached, min(usage.cache_write, prompt - cached))


@dataclass(frozen=True, slots=True)
class TurnUsage:
    """One request's counters, as the recorder adds them up per tenant, user and conversation
    (every field a non-negative integer; `spend` and `whole_cost` None when unpriced)."""

    tokens_original: int = 0
    tokens_forwarded: int = 0
    tokens_prompt: int = 0
    """The upstream's prompt tokens (0 when it sent no usage)."""
    tokens_cached: int = 0
    tokens_cache_write: int = 0
    tokens_completion: int = 0
    spend: int | None = None
    """Nano-units; None: the model has no known price, or the upstream sent no usage."""
    whole_cost: int | None = None
    """What the whole history would have cost, nano-units (None as `spend`)."""
    usage_known: bool = False
    """The upstream's answer carried a usage."""

    def counters(self) -> dict[str, int]:
        """The increments of the stored counters for this request."""
        out = {"requests": 1, "tokens_original": self.tokens_original,
               "tokens_forwarded": self.tokens_forwarded, "tokens_prompt": self.tokens_prompt,
               "tokens_cached": self.tokens_cached, "tokens_cache_write": self.tokens_cache_write,
               "tokens_completion": self.tokens_completion,
               "requests_without_usage": 0 if self.usage_known else 1}
        if self.spend is None or self.whole_cost is None:
            out["requests_unpriced"] = 1
        else:
            out.update(requests_priced=1, spend_nano=self.spend, whole_cost_nano=self.whole_cost)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"tokens_original": self.tokens_original,
                "tokens_forwarded": self.tokens_forwarded, "tokens_prompt": self.tokens_prompt,
                "tokens_cached": self.tokens_cached, "tokens_cache_write": self.tokens_cache_write,
                "tokens_completion": self.tokens_completion, "spend": self.spend,
                "whole_cost": self.whole_cost, "usage_known": self.usage_known}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TurnUsage:
        def number(name: str) -> int:
            value = data.get(name, 0)
            if type(value) is not int or value < 0:
                raise ValueError(f"usage.{name} must be a non-negative integer")
            return value

        def money(name: str) -> int | None:
            return None if data.get(name) is None else number(name)

        return cls(number("tokens_original"), number("tokens_forwarded"),
                   number("tokens_prompt"), number("tokens_cached"),
                   number("tokens_cache_write"), number("tokens_completion"),
                   money("spend"), money("whole_cost"), bool(data.get("usage_known", False)))


def turn_usage(usage: Usage | None, price: Price | None, tokens_original: int | None,
               tokens_forwarded: int | None) -> TurnUsage:
    """The counters of one request: its usage (None: the upstream sent none) priced at `price`
    (None: unknown), beside the whole history's estimate."""
    original, forwarded = tokens_original or 0, tokens_forwarded or 0
    if usage is None:
        return TurnUsage(original, forwarded)
    spend = whole = None
    if price is not None:
        spend = cost(usage, price)
        whole = cost(whole_history_usage(usage, tokens_original, tokens_forwarded), price)
    return TurnUsage(original, forwarded, usage.prompt, usage.cached, usage.cache_write,
                     usage.completion, spend, whole, usage_known=True)


def money(nano: int | None) -> float | None:
    """Nano-units as the currency's amount (for display: JSON, logs, metrics)."""
    return None if nano is None else nano / NANO


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None
