"""One-shot context: messages forwarded in their request and never stored.

Large tool results, fetched web pages, retrieved documents: the model needs them for this call
only. A message is one-shot when the client marks it (`"x_gateway_one_shot": true` on the
message; consumed at parsing, never forwarded) or when it is a `tool` message whose text is
longer than the tenant's threshold. The request then has two forms of the client's messages:

- the *forwarded* form, as the client sent it: what goes upstream in this request;
- the *kept* form, each one-shot message replaced by its placeholder — the same role, the same
  `tool_call_id` and other fields, content `[one-shot tool result, 12,345 chars, not stored]` —
  which is what is reconciled with the transcript and recorded.

Invariants (tested table-driven in tests/unit/test_one_shot.py):
- the placeholder depends only on the message itself (its role, its fields, the length of its
  text), so a stateless client resending the same message next turn gets the same kept form,
  the same chained id, and reconciles with the stored placeholder instead of forking;
- `withhold` returns as many messages as it is given, in order, differing only where one-shot;
- instructions (system/developer) are never one-shot: they are never stored anyway;
- nothing is mutated;
- a placeholder is never memory: `is_placeholder` recognises one, and the memory layers (turn
  index, summaries, facts, profile, topics, pins) leave it out, as they leave out a blank
  message (docs/memory.md, "Tool output is not user memory").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import AbstractSet, Sequence

from gateway.core.messages import Message

MARKER = "x_gateway_one_shot"
"""The message field a client sets to `true` to mark a message one-shot (the python and JS
OpenAI SDKs pass unknown message keys through unchanged)."""


@dataclass(frozen=True, slots=True)
class OneShotPolicy:
    tool_chars: int | None = 8000
    """A `tool` message whose text is longer than this many characters is one-shot; None: only
    the messages the client marks are. Characters, not tokens: the same message must be judged
    the same on every resend, whichever model (tokenizer) the request names."""


@dataclass(frozen=True, slots=True)
class Withheld:
    kept: tuple[Message, ...]
    """The messages with each one-shot message replaced by its placeholder (the same tuple
    when there is none)."""
    count: int
    """How many messages were one-shot."""


def is_one_shot(message: Message, marked: bool, policy: OneShotPolicy) -> bool:
    """Whether `message` is forwarded now and stored only as a placeholder. A message with no
    content (an assistant message that only calls tools) has nothing to withhold."""
    if message.is_instruction or message.content is None:
        return False
    if marked:
        return True
    return (message.role == "tool" and policy.tool_chars is not None
            and len(message.text) > policy.tool_chars)


def placeholder(message: Message) -> Message:
    """What the transcript keeps of a one-shot message: every field but its content."""
    what = "tool result" if message.role == "tool" else "message"
    return Message(role=message.role,
                   content=f"[one-shot {what}, {len(message.text):,} chars, not stored]",
                   extra=message.extra)


_PLACEHOLDER = re.compile(r"\[one-shot (?:tool result|message), [0-9]{1,3}(?:,[0-9]{3})* chars, "
                          r"not stored\]")


def is_placeholder(text: str) -> bool:
    """Whether `text` is the whole text of a placeholder (`placeholder`'s content): what the
    transcript keeps of a one-shot message says nothing of it and is not memory."""
    return _PLACEHOLDER.fullmatch(text) is not None


def withhold(messages: Sequence[Message], marked: AbstractSet[int],
             policy: OneShotPolicy) -> Withheld:
    """The kept form of `messages`; `marked`: indexes of the messages the client marked."""
    kept: list[Message] | None = None
    count = 0
    if policy.tool_chars is None and not marked:
        return Withheld(tuple(messages), 0)
    for i, message in enumerate(messages):
        # Every request passes here: only tool and marked messages are looked at closely.
        if message.role != "tool" and i not in marked:
            continue
        if is_one_shot(message, i in marked, policy):
            if kept is None:
                kept = list(messages)
            kept[i] = placeholder(message)
            count += 1
    return Withheld(tuple(messages) if kept is None else tuple(kept), count)


def restore(conversation: Sequence[Message], forwarded: Sequence[Message]) -> tuple[Message, ...]:
    """The conversation to forward: `conversation` (reconciled from the kept form, so it ends
    with the client's messages in kept form) with those last messages in the form the client
    sent them — full content for this call. Stored placeholders the client did not resend
    stay placeholders."""
    n = len(forwarded)
    if n > len(conversation):
        raise ValueError("the conversation must end with the client's messages")
    return tuple(conversation[:len(conversation) - n]) + tuple(forwarded)
