"""Token accounting of prompts: forwarded tokens and prompt-prefix reuse.

- `tokens(messages)` equals `gateway.core.text.tokens.count_messages` over the same messages with
  the cl100k tokenizer (the gateway's own accounting, the whole prompt, nothing excluded);
  per-message costs are memoised, since the same history messages are counted many times.
- `prefix_reuse(previous, current)`: the share of the current prompt's tokens that equal a
  prefix of the previous prompt. A prompt is rendered as one token sequence per message
  (`<|im_start|>{role}\\n{content}<|im_end|>\\n`, encoded as ordinary text) — the chat format
  separates messages with special tokens, so per-message encoding is what a provider's prompt
  cache sees. The common prefix is counted token by token (`shared_prefix`; billing.py prices
  it under each provider's cache rules).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import tiktoken

from gateway.core.messages import Message
from gateway.core.text.tokens import REPLY_PRIMING, count_message
from gateway.tokenizer import CL100K, tokenizer_for_encoding

Prompt = Sequence[Mapping[str, object]]


class PromptMeter:
    """Memoising token meter for prompts of plain `{role, content}` messages (and any other
    fields, which are counted as the gateway counts them)."""

    def __init__(self, encoding: str = CL100K) -> None:
        self.tokenizer = tokenizer_for_encoding(encoding)
        self._encoding = tiktoken.get_encoding(encoding)  # gateway set up the offline cache
        self._costs: dict[object, int] = {}
        self._rendered: dict[object, tuple[int, ...]] = {}

    @staticmethod
    def _key(message: Mapping[str, object]) -> object:
        if len(message) == 2 and "content" in message and isinstance(message["content"], str):
            return (message["role"], message["content"])
        return repr(sorted(message.items()))

    def message_tokens(self, message: Mapping[str, object]) -> int:
        key = self._key(message)
        cost = self._costs.get(key)
        if cost is None:
            cost = count_message(Message.from_openai(message), self.tokenizer)
            self._costs[key] = cost
        return cost

    def text_tokens(self, text: str) -> int:
        """cl100k tokens of a plain text (memoised)."""
        key = ("", text)
        cost = self._costs.get(key)
        if cost is None:
            cost = self._costs[key] = len(self._encoding.encode_ordinary(text))
        return cost

    def tokens(self, messages: Prompt) -> int:
        """count_messages(messages, cl100k)."""
        if not messages:
            return 0
        return REPLY_PRIMING + sum(self.message_tokens(m) for m in messages)

    def rendered(self, message: Mapping[str, object]) -> tuple[int, ...]:
        key = self._key(message)
        tokens = self._rendered.get(key)
        if tokens is None:
            content = message.get("content")
            text = content if isinstance(content, str) else repr(content)
            tokens = tuple(self._encoding.encode_ordinary(
                f"<|im_start|>{message['role']}\n{text}<|im_end|>\n"))
            self._rendered[key] = tokens
        return tokens

    def prefix_reuse(self, previous: Prompt, current: Prompt) -> float:
        """Share of `current`'s rendered tokens equal to a prefix of `previous` (0.0..1.0)."""
        shared, _, total = self.shared_prefix(previous, current)
        return shared / total if total else 0.0

    def shared_prefix(self, previous: Prompt, current: Prompt) -> tuple[int, int, int]:
        """(rendered tokens of `current` equal to a prefix of `previous`, rendered tokens of
        `previous`, rendered tokens of `current`)."""
        shared = 0
        for before, now in zip(previous, current):
            a, b = self.rendered(before), self.rendered(now)
            if a == b:
                shared += len(b)
                continue
            shared += _common_prefix(a, b)
            break
        return (shared, sum(len(self.rendered(m)) for m in previous),
                sum(len(self.rendered(m)) for m in current))


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
