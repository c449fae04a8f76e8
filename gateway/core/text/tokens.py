"""Token counting as the core needs it: an interface, plus OpenAI's per-message accounting."""

from __future__ import annotations

import json
from typing import Protocol, Sequence

from gateway.core.messages import Message, thaw

# OpenAI's chat format costs a few tokens per message beyond its text, and 3 to prime the reply
# (the figures of OpenAI's cookbook for gpt-3.5/4-class models).
PER_MESSAGE = 3
PER_NAME = 1
REPLY_PRIMING = 3
# A non-text content part (image, audio, file) is counted at a flat rate: its real cost depends
# on the provider and is not knowable from the request alone.
PER_NON_TEXT_PART = 85


class Tokenizer(Protocol):
    def count(self, text: str) -> int: ...

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of `text` that has at most `max_tokens` tokens."""
        ...


def count_message(message: Message, tokenizer: Tokenizer) -> int:
    """The message's prompt tokens. A function of what the message says (`Message.canonical`):
    fields that are null or an empty list count nothing, as OpenAI reads them as absent, and
    structured fields are counted as JSON with sorted keys — so two messages with one chained
    id always cost the same (the pipeline keeps a history's costs by id: gateway/
    history_costs.py)."""
    n = PER_MESSAGE + tokenizer.count(message.role) + tokenizer.count(message.text)
    if message.content is not None and not isinstance(message.content, str):
        n += PER_NON_TEXT_PART * sum(
            1 for part in thaw(message.content)
            if not (isinstance(part, dict) and part.get("type") == "text"))
    for key, frozen in message.extra:
        value = thaw(frozen)
        if value is None or value == []:
            continue
        if key == "name":
            n += PER_NAME
        n += tokenizer.count(value if isinstance(value, str)
                             else json.dumps(value, ensure_ascii=False, sort_keys=True))
    return n


def count_each(messages: Sequence[Message], tokenizer: Tokenizer) -> tuple[int, ...]:
    """`count_message` of each message, in order: the same numbers, for a long history. A
    role is counted once, and a plain message (text content, no other field) is priced in
    line: a history's cost is then one count of each text (which the tokenizer may cache)."""
    roles: dict[str, int] = {}
    count = tokenizer.count
    out = []
    for m in messages:
        content = m.content
        if m.extra or type(content) is not str:
            out.append(count_message(m, tokenizer))
            continue
        role = roles.get(m.role)
        if role is None:
            role = roles[m.role] = count(m.role)
        out.append(PER_MESSAGE + role + count(content))
    return tuple(out)


def count_messages(messages: list[Message] | tuple[Message, ...], tokenizer: Tokenizer) -> int:
    """Prompt tokens of a chat request made of `messages` (0 for no messages)."""
    if not messages:
        return 0
    return REPLY_PRIMING + sum(count_each(messages, tokenizer))
