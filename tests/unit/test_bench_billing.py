"""Billing a replayed request under each provider's prompt-cache rules (bench/locomo/billing.py):
hand-computed cases for each rule, and the meter's shared prefix they are computed from."""

from __future__ import annotations

import pytest

from bench.locomo.billing import RULES, bill, cached_tokens, cost
from bench.locomo.meter import PromptMeter

RULE = {rule.name: rule for rule in RULES}


def test_openai_caches_from_1024_tokens_in_steps_of_128():
    rule = RULE["openai-0.25"]
    assert cached_tokens(rule, shared=1023, previous_total=2000, total=3000) == 0
    assert cached_tokens(rule, shared=1024, previous_total=2000, total=3000) == 1024
    assert cached_tokens(rule, shared=1300, previous_total=2000, total=3000) == 1280
    assert cached_tokens(rule, shared=2000, previous_total=None, total=3000) == 0  # first
    assert cost(rule, 1300, 2000, 3000) == pytest.approx(1280 * 0.25 + 1720)
    assert cost(RULE["openai-0.1"], 1300, 2000, 3000) == pytest.approx(1280 * 0.1 + 1720)


def test_anthropic_reads_only_a_whole_earlier_prompt_and_writes_at_a_premium():
    rule = RULE["anthropic"]
    # The earlier prompt is wholly a prefix: read at 0.1x, the rest written at 1.25x.
    assert cost(rule, 2000, 2000, 2600) == pytest.approx(2000 * 0.1 + 600 * 1.25)
    # One token of the earlier prompt differs: its breakpoint does not match, all written.
    assert cost(rule, 1999, 2000, 2600) == pytest.approx(2600 * 1.25)
    # Under 1,024 tokens nothing is cached, nothing is written.
    assert cost(rule, 500, 500, 900) == 900


def test_deepseek_caches_64_token_units():
    rule = RULE["deepseek"]
    assert cached_tokens(rule, shared=63, previous_total=100, total=200) == 0
    assert cached_tokens(rule, shared=130, previous_total=140, total=200) == 128
    assert cost(rule, 130, 140, 200) == pytest.approx(128 * 0.1 + 72)


def test_an_append_only_history_is_billed_mostly_as_cache_reads_and_a_changed_head_is_not():
    meter = PromptMeter()
    turns = [{"role": "user" if i % 2 == 0 else "assistant",
              "content": f"Turn {i}: " + "the harbour bicycle chain story " * 12}
             for i in range(40)]
    first, second = turns[:30], turns[:32]
    shared, previous_total, total = meter.shared_prefix(first, second)
    assert shared == previous_total < total
    appended = bill(meter, first, second)
    assert appended == {r.name: cost(r, shared, previous_total, total) for r in RULES}
    assert appended["openai-0.25"] < 0.4 * total and appended["anthropic"] < 0.4 * total
    rebuilt = bill(meter, first, [{"role": "system", "content": "Recalled: x"}, *second])
    assert rebuilt["openai-0.25"] == total + meter.shared_prefix([], [
        {"role": "system", "content": "Recalled: x"}])[2]  # nothing shared: all full price
    assert bill(meter, None, second)["deepseek"] == total  # a conversation's first request
