"""Shortening one long history message: its head, then `TRUNCATION_MARKER`.

The rewrite forwards a history message longer than the policy's `truncate_message_tokens` as a
shortened copy (gateway/core/context/rewrite.py); these are the pure pieces it uses. Inputs are
never
altered: a message that fits is returned as the same object, so its cost need not be counted
again.
"""

from __future__ import annotations

from typing import Any

from gateway.core.messages import Message, thaw
from gateway.core.text.tokens import Tokenizer, count_message

TRUNCATION_MARKER = " […]"


def truncate_message(message: Message, max_tokens: int, tokenizer: Tokenizer) -> Message:
    """`message` itself if its text has at most `max_tokens` tokens, else a copy whose text is
    cut to its first `max_tokens` tokens followed by `TRUNCATION_MARKER`. In a list of content
    parts the text parts share the limit in order: the part that overflows is cut and marked,
    later text parts are dropped, other parts (images, audio, files) are all kept."""
    content = message.content
    if content is None or tokenizer.count(message.text) <= max_tokens:
        return message
    if isinstance(content, str):
        return message.with_content(_cut(content, max_tokens, tokenizer))
    parts, changed = _truncate_parts(thaw(content), max_tokens, tokenizer)
    return message.with_content(parts) if changed else message


def _truncate_parts(parts: list[Any], max_tokens: int,
                    tokenizer: Tokenizer) -> tuple[list[Any], bool]:
    out: list[Any] = []
    room, cut = max_tokens, False
    for part in parts:
        if not (isinstance(part, dict) and isinstance(part.get("text"), str)):
            out.append(part)
            continue
        if cut:
            continue
        n = tokenizer.count(part["text"])
        if n <= room:
            out.append(part)
            room -= n
        else:
            out.append({**part, "text": _cut(part["text"], room, tokenizer)})
            cut = True
    return out, cut


def _cut(text: str, max_tokens: int, tokenizer: Tokenizer) -> str:
    return tokenizer.truncate(text, max(0, max_tokens)) + TRUNCATION_MARKER


def shorten(unit: tuple[Message, ...], max_tokens: int,
            tokenizer: Tokenizer) -> tuple[Message, ...]:
    """Each message of `unit` truncated to `max_tokens` (the same objects where nothing is cut)."""
    return tuple(truncate_message(m, max_tokens, tokenizer) for m in unit)


def cost_as_shortened(unit: tuple[Message, ...], originals: tuple[Message, ...],
                      costs: tuple[int, ...], tokenizer: Tokenizer) -> int:
    """count_message summed over `unit`, the possibly shortened `originals` (whose costs are
    `costs`): only a shortened copy is counted."""
    return sum(c if m is o else count_message(m, tokenizer)
               for m, o, c in zip(unit, originals, costs))
