"""Usage read from upstream answers, priced exactly, and the whole history's estimate
(gateway/core/spend.py); prices from the config or litellm's map (gateway/upstream/prices.py)."""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.config import parse_config
from gateway.core.spend import (NANO, Price, TurnUsage, Usage, cost, read_usage, turn_usage,
                                whole_history_usage)
from gateway.upstream.prices import map_price, route_prices

ROOT = Path(__file__).resolve().parents[2]
GPT4O = Price.per_million(2.5, 10, cached_input=1.25)


@pytest.mark.parametrize("data, expected", [
    ({"prompt_tokens": 1500, "completion_tokens": 40,
      "prompt_tokens_details": {"cached_tokens": 1280}}, Usage(1500, 40, 1280, 0)),
    # litellm's Anthropic usage: prompt includes cache reads and writes
    ({"prompt_tokens": 2310, "completion_tokens": 5, "cache_read_input_tokens": 2000,
      "cache_creation_input_tokens": 300,
      "prompt_tokens_details": {"cached_tokens": 2000, "cache_creation_tokens": 300}},
     Usage(2310, 5, 2000, 300)),
    # DeepSeek's own fields, on the direct path
    ({"prompt_tokens": 900, "completion_tokens": 2, "prompt_cache_hit_tokens": 640,
      "prompt_cache_miss_tokens": 260}, Usage(900, 2, 640)),
    ({"prompt_tokens": 10, "completion_tokens": 2}, Usage(10, 2)),
    ({"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": None}, Usage(10, 2)),
    # a cache count beyond the prompt is capped at it
    ({"prompt_tokens": 10, "completion_tokens": 2,
      "prompt_tokens_details": {"cached_tokens": 50}}, Usage(10, 2, 10)),
])
def test_usage_is_read_from_openai_and_litellm_shapes(data, expected):
    assert read_usage(data) == expected


@pytest.mark.parametrize("data", [None, {}, {"prompt_tokens": 3}, {"prompt_tokens": -1,
                                  "completion_tokens": 2}, {"prompt_tokens": "3",
                                  "completion_tokens": 2}, {"prompt_tokens": True,
                                  "completion_tokens": 2}, [1, 2]])
def test_a_usage_not_in_a_known_shape_is_none(data):
    assert read_usage(data) is None


def test_cost_is_exact_to_the_price_table():
    # 220 uncached × 2.5 + 1280 cached × 1.25 + 40 × 10, per million
    assert cost(Usage(1500, 40, 1280), GPT4O) == 220 * 2500 + 1280 * 1250 + 40 * 10_000
    write = Price.per_million(3, 15, cached_input=0.3, cache_write_input=3.75)
    assert cost(Usage(2310, 5, 2000, 300), write) == 10 * 3000 + 2000 * 300 + 300 * 3750 \
        + 5 * 15_000
    assert cost(Usage(10 ** 6, 0), Price.per_million(0.15, 0.6)) == 150_000_000  # $0.15


def test_prices_without_cache_prices_charge_cached_tokens_as_input():
    assert Price.per_million(2, 8).cached_input == Price.per_million(2, 8).input
    assert cost(Usage(100, 0, 100), Price.per_million(2, 8)) == cost(Usage(100, 0),
                                                                     Price.per_million(2, 8))


def test_the_whole_history_adds_what_the_rewrite_left_out_with_the_same_cache():
    assert whole_history_usage(Usage(1500, 40, 1280), 9000, 1400) == Usage(9100, 40, 1280)
    # nothing left out: the same usage
    assert whole_history_usage(Usage(1500, 40, 1280), 1400, 1400) == Usage(1500, 40, 1280)
    assert whole_history_usage(Usage(1500, 40, 1280), None, None) == Usage(1500, 40, 1280)


@given(st.integers(0, 10 ** 6), st.integers(0, 10 ** 6), st.integers(0, 10 ** 6),
       st.integers(0, 10 ** 5), st.integers(0, 10 ** 6), st.integers(0, 10 ** 6))
def test_the_whole_history_never_costs_less_than_what_was_sent(prompt, cached, write,
                                                               completion, original, forwarded):
    usage = read_usage({"prompt_tokens": prompt, "completion_tokens": completion,
                        "prompt_tokens_details": {"cached_tokens": cached},
                        "cache_creation_input_tokens": write})
    assert usage is not None and usage.cached + usage.cache_write <= usage.prompt
    whole = whole_history_usage(usage, original, forwarded)
    assert whole.prompt >= usage.prompt and whole.cached + whole.cache_write <= whole.prompt
    price = Price.per_million(3, 15, cached_input=0.3, cache_write_input=3.75)
    assert cost(whole, price) >= cost(usage, price)


def test_a_turn_without_usage_or_price_has_no_spend():
    assert turn_usage(None, GPT4O, 100, 80) == TurnUsage(100, 80)
    unpriced = turn_usage(Usage(10, 2), None, 10, 10)
    assert unpriced.spend is None and unpriced.tokens_prompt == 10 and unpriced.usage_known
    assert unpriced.counters()["requests_unpriced"] == 1 and "spend_nano" not in \
        unpriced.counters()
    assert TurnUsage(1, 1).counters()["requests_without_usage"] == 1


def test_turn_usage_counters_and_round_trip():
    counted = turn_usage(Usage(1500, 40, 1280), GPT4O, 9000, 1400)
    assert counted.counters() == {
        "requests": 1, "tokens_original": 9000, "tokens_forwarded": 1400,
        "tokens_prompt": 1500, "tokens_cached": 1280, "tokens_cache_write": 0,
        "tokens_completion": 40, "requests_without_usage": 0, "requests_priced": 1,
        # GPT4O by hand: $2.50 / $1.25 (cached) / $10 a million tokens are 2,500 / 1,250 /
        # 10,000 nano-units a token; 220 uncached + 1,280 cached prompt tokens, 40 completion.
        "spend_nano": 220 * 2500 + 1280 * 1250 + 40 * 10_000,
        # The whole history: 7,600 tokens more of prompt (9,000 sent, 1,400 forwarded).
        "whole_cost_nano": (9100 - 1280) * 2500 + 1280 * 1250 + 40 * 10_000}
    assert counted.spend == 2_550_000
    assert TurnUsage.from_dict(counted.to_dict()) == counted
    with pytest.raises(ValueError):
        TurnUsage.from_dict({**counted.to_dict(), "tokens_prompt": -1})


def test_litellm_map_prices_by_name_and_provider():
    cost_map = {"gpt-4o-mini": {"litellm_provider": "openai", "input_cost_per_token": 1.5e-07,
                                "output_cost_per_token": 6e-07,
                                "cache_read_input_token_cost": 7.5e-08},
                "deepseek/deepseek-chat": {"litellm_provider": "deepseek",
                                           "input_cost_per_token": 2.8e-07,
                                           "output_cost_per_token": 4.2e-07},
                "no-output": {"input_cost_per_token": 1e-06}}
    price = map_price("openai/gpt-4o-mini", cost_map)
    assert price == Price(Decimal("1.5e-07"), Decimal("6e-07"), Decimal("7.5e-08"),
                          Decimal("1.5e-07"))
    assert map_price("gpt-4o-mini", cost_map) == price
    assert map_price("deepseek/deepseek-chat", cost_map) is not None
    assert map_price("groq/gpt-4o-mini", cost_map) is None  # filed under another provider
    assert map_price("openai/llama3.1:8b", cost_map) is None
    assert map_price("no-output", cost_map) is None


def test_the_installed_litellm_map_is_read_without_importing_litellm():
    # In a fresh interpreter: this one may have imported litellm for another test already.
    script = ("import sys\n"
              "from gateway.core.spend import Usage, cost\n"
              "from gateway.upstream.prices import litellm_cost_map, map_price\n"
              "price = map_price('openai/gpt-4o-mini', litellm_cost_map())\n"
              "print(cost(Usage(10 ** 6, 0), price), 'litellm' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    nano, imported = done.stdout.split()
    assert int(nano) > 0 and imported == "False"


def _config(models):
    return parse_config({"store": "redis://127.0.0.1:1/0", "tenants": {"acme": {
        "api_keys": [{"sha256": "0" * 64}], "models": models}}})


def test_route_prices_take_the_config_first_and_read_the_map_only_when_needed():
    reads = []

    def cost_map():
        reads.append(1)
        return {"gpt-4o-mini": {"litellm_provider": "openai", "input_cost_per_token": 1e-07,
                                "output_cost_per_token": 2e-07}}

    own = _config({"self": {"model": "openai/llama", "api_base": "http://h/v1",
                            "price": {"input": 0, "output": 0}},
                   "fake": {"model": "fake/echo"}})
    prices = route_prices(own, cost_map)
    assert prices[("acme", "self")] == Price.per_million(0, 0) and prices[("acme", "fake")] is None
    assert reads == []
    mapped = route_prices(_config({"a": {"model": "gpt-4o-mini"},
                                   "b": {"model": "openai/gpt-4o-mini"},
                                   "c": {"model": "openai/unknown"}}), cost_map)
    assert reads == [1]
    assert mapped[("acme", "a")] == mapped[("acme", "b")] is not None
    assert mapped[("acme", "c")] is None


def test_a_price_in_the_config_is_strict():
    from gateway.errors import ConfigError

    with pytest.raises(ConfigError, match="models.m.price.input"):
        _config({"m": {"model": "fake/echo", "price": {"input": -1, "output": 0}}})
    with pytest.raises(ConfigError, match="models.m.price.cached"):
        _config({"m": {"model": "fake/echo", "price": {"input": 1, "output": 0, "cached": 1}}})


def test_money_is_whole_nano_units():
    assert NANO == 10 ** 9
    assert isinstance(cost(Usage(7, 3, 1), Price.per_million(0.0375, 0.15)), int)
