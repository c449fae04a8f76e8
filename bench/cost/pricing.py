"""The models the cost benchmark prices turns for, one per provider cache rule, at the prices of
litellm's model cost map as installed (read as data: gateway/upstream/prices.py).

Each provider's caching mechanics (minimum prompt, step, breakpoints) are billing.py's rules;
what a cached, a written and a plain input token cost are the model's own prices: gpt-4.1
reads its cache at 0.25× its input price, gpt-5 at 0.1×, claude-sonnet-4-5 at 0.1× and writes
at 1.25×, deepseek-chat at 0.1×. Output tokens are left out (the same reply whatever the
assembly). A model the installed map does not price gets no cost (None), never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable, Mapping

from bench.locomo.billing import RULES, Billed, CacheRule
from gateway.core.spend import Price
from gateway.upstream.prices import litellm_cost_map, map_price

MECHANICS: dict[str, CacheRule] = {
    "openai": next(r for r in RULES if r.name == "openai-0.25"),
    "anthropic": next(r for r in RULES if r.name == "anthropic"),
    "deepseek": next(r for r in RULES if r.name == "deepseek"),
}
"""Provider → how its cache bills a prompt (the read multiple of these rules is not used)."""
MODELS = (("gpt-4.1", "openai"), ("gpt-5", "openai"), ("claude-sonnet-4-5", "anthropic"),
          ("deepseek-chat", "deepseek"))


@dataclass(frozen=True, slots=True)
class PricedModel:
    name: str
    provider: str
    price: Price | None

    @property
    def rule(self) -> str:
        """The price rule in the words of issue 23 (`openai-0.25`, `anthropic`...)."""
        if self.provider != "openai" or self.price is None or not self.price.input:
            return self.provider
        return f"openai-{float(self.price.cached_input / self.price.input):g}"

    def dollars(self, billed: Billed) -> float | None:
        if self.price is None:
            return None
        p = self.price
        return float(billed.cached * p.cached_input + billed.written * p.cache_write
                     + billed.plain * p.input)


def priced_models(cost_map: Callable[[], Mapping[str, Any]] = litellm_cost_map
                  ) -> tuple[PricedModel, ...]:
    table = cost_map()
    return tuple(PricedModel(name, provider, map_price(name, table))
                 for name, provider in MODELS)


def price_summary(model: PricedModel) -> dict[str, Any]:
    """The prices used, per million tokens (for the report's metadata)."""
    if model.price is None:
        return {"model": model.name, "price": None}
    million = Decimal(10 ** 6)
    return {"model": model.name, "provider": model.provider, "rule": model.rule,
            **{f"{field}_per_million": float(getattr(model.price, field) * million)
               for field in ("input", "cached_input", "cache_write")}}
