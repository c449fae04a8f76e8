"""Null probes: messages that need no memory (chit-chat, general questions), asked at the end of
every replayed conversation like the questions, to measure what recall adds when nothing it
holds is relevant. Their figure is `null_probe_recalled_tokens`: the tokens of the recalled
block (the system message holding `<memory>`, gateway/core/context/blocks.py) in the prompt
the gateway forwarded, mean per probe. Not scored: there is no evidence to find.

The probes are in the conversation's language (Chinese when its turns are, else English);
nothing in them names anything a conversation of the dev sets is about.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from bench.locomo.meter import PromptMeter
from gateway.core.context.blocks import BLOCK_ROLE, RECALLED_TAG

NULL_PROBES = {
    "en": ("Thanks, that's all for now!", "What is 17 times 23?",
           "Can you write a four-line poem about the sea?", "How long should I boil an egg?",
           "Good morning! How are you today?"),
    "zh": ("谢谢，暂时就这些！", "17乘以23等于多少？", "你能写一首关于大海的四行诗吗？",
           "鸡蛋应该煮多久？", "早上好！你今天怎么样？"),
}
_CJK = re.compile(r"[\u4e00-\u9fff]")
_OPENING = f"<{RECALLED_TAG}>"


def null_probes(turns: Sequence[str]) -> tuple[str, ...]:
    """The probes for a conversation whose turns are `turns`: Chinese when most of its turns
    hold Chinese characters, else English."""
    chinese = sum(1 for t in turns if _CJK.search(t))
    return NULL_PROBES["zh" if chinese * 2 > len(turns) else "en"]


def recalled_tokens(meter: PromptMeter, prompt: Sequence[dict[str, Any]]) -> int:
    """Tokens of the recalled block(s) of a forwarded prompt (0 without one)."""
    return sum(meter.message_tokens(m) for m in prompt
               if m.get("role") == BLOCK_ROLE and isinstance(m.get("content"), str)
               and _OPENING in m["content"])
