"""Null probes (bench/locomo/null_probes.py): asked in the conversation's language, and what
recall added to them counted from the recalled block alone."""

from __future__ import annotations

from bench.locomo.meter import PromptMeter
from bench.locomo.null_probes import NULL_PROBES, null_probes, recalled_tokens


def test_probes_follow_the_conversations_language():
    assert null_probes(["我住在北京。", "好的！", "Okay"]) == NULL_PROBES["zh"]
    assert null_probes(["I live in Paris.", "我住在北京。", "Nice"]) == NULL_PROBES["en"]


def test_only_the_recalled_block_is_counted():
    meter = PromptMeter()
    recalled = {"role": "system", "content": "Earlier, maybe relevant.\n<memory>\n"
                                             "- Ada: I moved to Lisbon.\n</memory>"}
    prompt = [{"role": "system", "content": "You are helpful."}, recalled,
              {"role": "user", "content": "What is 17 times 23?"}]
    assert recalled_tokens(meter, prompt) == meter.message_tokens(recalled) > 0
    assert recalled_tokens(meter, [prompt[0], prompt[2]]) == 0
