"""The cost benchmark's client system prompt (bench/cost/system_prompt.py)."""

from __future__ import annotations

import pytest

from bench.cost.runs import _system_messages, _threads
from bench.cost.system_prompt import system_prompt
from bench.locomo.meter import PromptMeter


@pytest.mark.parametrize("tokens", [0, 1, 1500, 4000])
def test_exactly_that_many_tokens_and_the_same_text_every_time(tokens):
    meter = PromptMeter()
    text = system_prompt(tokens, meter)
    assert meter.tokenizer.count(text) == tokens
    assert text == system_prompt(tokens, meter)


def test_the_whole_history_counts_it_on_every_request():
    from pathlib import Path

    from bench.cost.data import build

    folder = Path(__file__).resolve().parents[3] / "shared" / "bench-data"
    if not (folder / "locomo-dev.json").exists():
        pytest.skip("no bench data here")
    data = build("user-5-conversations", folder)
    meter = PromptMeter()
    conversation = data.conversations[0]
    plain = _threads(data, conversation, meter, [])
    system = _system_messages(1500, meter)
    with_prompt = _threads(data, conversation, meter, system)
    added = meter.message_tokens(system[0])
    assert [b - a for a, b in zip(plain[0].history_tokens, with_prompt[0].history_tokens)] \
        == [added] * len(plain[0].history_tokens)

