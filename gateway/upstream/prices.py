"""What each model route costs: the tenant's own `price`, else litellm's model cost map.

The map is read as data — the JSON file the installed litellm ships
(`model_prices_and_context_window_backup.json`, what `LITELLM_LOCAL_MODEL_COST_MAP=True` makes
litellm itself read) — without importing litellm (seconds) or fetching anything, and only when
some route needs it: once per process, at start-up. A model the map does not name has no
price (spend null), never a guessed one.

Lookup, from the route's model string: the string itself (`deepseek/deepseek-chat`), else for
`<provider>/<name>` the bare `<name>` when the map files it under that provider
(`openai/gpt-4o-mini` → `gpt-4o-mini`, provider `openai`). A route with an `api_base` is
priced by its model's name too: an OpenAI-compatible server that bills otherwise (or not at
all) sets `price` in the config.
"""

from __future__ import annotations

import importlib.util
import json
import logging
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Mapping

from gateway.config import Config, ModelPriceConfig
from gateway.core.spend import Price

log = logging.getLogger(__name__)

COST_MAP_FILE = "model_prices_and_context_window_backup.json"


def litellm_cost_map() -> dict[str, Any]:
    """litellm's model cost map as shipped with the installed package ({} if unreadable)."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = Path(next(iter(spec.submodule_search_locations)), COST_MAP_FILE)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.warning("litellm's model cost map could not be read (%r): models without a "
                    "configured price are unpriced", exc)
        return {}
    return data if isinstance(data, dict) else {}


def map_price(model: str, cost_map: Mapping[str, Any]) -> Price | None:
    """The price litellm's map gives `model` (a litellm model string), or None."""
    entry = cost_map.get(model)
    if not isinstance(entry, Mapping) and "/" in model:
        provider, name = model.split("/", 1)
        found = cost_map.get(name)
        if isinstance(found, Mapping) and found.get("litellm_provider") == provider:
            entry = found
    if not isinstance(entry, Mapping):
        return None
    input_cost, output_cost = _per_token(entry, "input_cost_per_token"), \
        _per_token(entry, "output_cost_per_token")
    if input_cost is None or output_cost is None:
        return None
    cached = _per_token(entry, "cache_read_input_token_cost")
    write = _per_token(entry, "cache_creation_input_token_cost")
    return Price(input_cost, output_cost, input_cost if cached is None else cached,
                 input_cost if write is None else write)


def configured_price(price: ModelPriceConfig) -> Price:
    return Price.per_million(price.input, price.output, price.cached_input,
                             price.cache_write_input)


def route_prices(config: Config, cost_map: Callable[[], Mapping[str, Any]] = litellm_cost_map
                 ) -> dict[tuple[str, str], Price | None]:
    """(tenant, model alias) → its price (None: unknown). `cost_map` is read only if a route
    without a configured price needs it (a `fake/` model is unpriced unless configured)."""
    loaded: list[Mapping[str, Any]] = []

    def the_map() -> Mapping[str, Any]:
        if not loaded:
            loaded.append(cost_map())
        return loaded[0]

    out: dict[tuple[str, str], Price | None] = {}
    for name, tenant in config.tenants.items():
        for alias, route in tenant.models.items():
            if route.price is not None:
                out[name, alias] = configured_price(route.price)
            elif route.model.startswith("fake/"):
                out[name, alias] = None
            else:
                out[name, alias] = map_price(route.model, the_map())
    return out


def _per_token(entry: Mapping[str, Any], field: str) -> Decimal | None:
    value = entry.get(field)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        return None
    return Decimal(repr(value))
