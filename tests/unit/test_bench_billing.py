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


def test_anthropic_with_the_gateway_s_mark_reads_and_writes_only_the_marked_prefix():
    rule = RULE["anthropic"]
    # The earlier prompt (2,600) was marked at 2,000 and this one repeats those 2,000 and is
    # marked at 2,300: read 2,000, write 300, the 400 after the mark at the plain price.
    assert cost(rule, 2100, 2600, 2700, previous_mark=2000, mark=2300) == pytest.approx(
        2000 * 0.1 + 300 * 1.25 + 400)
    # A step: the marked prefix is not repeated, nothing read, the new mark written.
    assert cost(rule, 1500, 2600, 2700, previous_mark=2000, mark=1800) == pytest.approx(
        1800 * 1.25 + 900)
    # A mark under 1,024 tokens caches nothing.
    assert cost(rule, 900, 2600, 2700, previous_mark=2000, mark=900) == 2700
    # Automatic caching ignores the marks.
    openai = RULE["openai-0.1"]
    assert cost(openai, 2100, 2600, 2700, 2000, 2300) == cost(openai, 2100, 2600, 2700)


def test_bill_puts_the_gateway_s_mark_after_its_stable_messages():
    meter = PromptMeter()
    stable = [{"role": "user", "content": f"Turn {i}: " + "words of the story " * 30}
              for i in range(8)]
    first = [*stable, {"role": "system", "content": "Recalled: one"}]
    second = [*stable, {"role": "user", "content": "more " * 40},
              {"role": "system", "content": "Recalled: two"}]
    marked = sum(len(meter.rendered(m)) for m in stable)
    shared, previous_total, total = meter.shared_prefix(first, second)
    assert marked >= 1024 and shared < previous_total  # the tail differs
    billed = bill(meter, first, second, previous_stable=8, stable=9)
    mark = marked + len(meter.rendered(second[8]))
    assert billed["anthropic"] == cost(RULE["anthropic"], shared, previous_total, total,
                                       marked, mark)
    assert billed["anthropic"] < bill(meter, first, second)["anthropic"]


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
