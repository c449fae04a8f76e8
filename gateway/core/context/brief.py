"""A conversation's memory brief: what the gateway knows of the user that matters to one
conversation, made once and forwarded unchanged on every request of it.

At a conversation's first request the pipeline gives `make_brief` the user's profile and the
items memory holds from outside the conversation (the user's other conversations, standing
facts), ranked for the opening message; the brief is the profile and the best of those items
that fit `budget` tokens, as ONE `system` message marked as background data, not instructions
(the rendering of gateway/core/context/blocks.py: a short header in the opening message's
language, one pair of tags, each item one line, tags inside items made inert). The pipeline
stores it with the conversation and the rewrite places the same bytes right after the
client's instructions, before the history (`with_brief`, `MemoryContext.brief`), so from the
second request on it is part of the prompt's cached prefix.

Invariants: pure and deterministic (the same inputs give the same bytes); the brief, counted
with `count_message`, never exceeds `budget`; the profile goes first and whole or not at all;
items are taken in rank order, each whole or skipped, and shown in reading order (facts first,
then by place); an item saying what an earlier-taken one says (same id, or the same line) is
not taken twice; empty memory or a budget of 0 gives no brief (`Brief.message` is None).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from gateway.core.context.blocks import (BLOCK_ROLE, ENGLISH, RECALLED_TAG, Framing,
                                         MemoryContext, block_frame, dated_lines, escape_tag,
                                         one_line, recalled_in_reading_order, split_anchor)
from gateway.core.messages import Message
from gateway.core.recall.recollection import Recollection
from gateway.core.text.tokens import Tokenizer, count_message


@dataclass(frozen=True, slots=True)
class Brief:
    """A conversation's memory brief as stored: its text and what it shows."""

    text: str = ""
    """The system message's content; "" for no brief."""
    item_ids: tuple[str, ...] = ()
    """The ids of the items shown, in rank order."""
    lines: tuple[str, ...] = ()
    """Their one-line texts without date anchors (what recall must not repeat)."""
    profile: bool = False
    """Whether it shows the profile."""
    tokens: int = 0
    """count_message of its message (0 without one)."""

    @property
    def message(self) -> Message | None:
        return Message.of(BLOCK_ROLE, self.text) if self.text else None


def make_brief(profile: str | None, items: Sequence[Recollection], budget: int,
               tokenizer: Tokenizer, framing: Framing = ENGLISH) -> Brief:
    """The brief of `profile` (rendered text, or None) and `items` (best first) within
    `budget` tokens (see the module docstring). Each candidate is measured as rendered: a
    brief is made once per conversation."""
    if budget <= 0:
        return Brief()
    header = framing.brief
    shown_profile = profile.strip() if profile and profile.strip() else None
    best = Brief()
    if shown_profile is not None:
        best = _measured(header, shown_profile, (), tokenizer)
        if best.tokens > budget:
            best, shown_profile = Brief(), None
    taken: list[Recollection] = []
    seen_ids: set[str] = set()
    seen_lines: set[str] = set()
    for item in items:
        text = one_line(item.text)
        rest = split_anchor(text)[1]
        if not text or item.id in seen_ids or rest in seen_lines:
            continue
        candidate = _measured(header, shown_profile, (*taken, item), tokenizer)
        if candidate.tokens <= budget:
            best = candidate
            taken.append(item)
            seen_ids.add(item.id)
            seen_lines.add(rest)
    return best


def _measured(header: str, profile: str | None, items: Sequence[Recollection],
              tokenizer: Tokenizer) -> Brief:
    """The brief showing `profile` and `items` (in rank order), rendered and counted."""
    body: list[str] = [profile] if profile is not None else []
    ordered = recalled_in_reading_order(items)
    body += dated_lines([split_anchor(one_line(r.text)) for r in ordered])
    if not body:
        return Brief()
    opening, closing = block_frame(header, RECALLED_TAG)
    text = f"{opening}{escape_tag(chr(10).join(body), RECALLED_TAG)}\n{closing}"
    return Brief(text=text, item_ids=tuple(r.id for r in items),
                 lines=tuple(split_anchor(one_line(r.text))[1] for r in items),
                 profile=profile is not None,
                 tokens=count_message(Message.of(BLOCK_ROLE, text), tokenizer))


def with_brief(memory: MemoryContext, brief: Brief, *, asks_past: bool,
               outside: Callable[[Recollection], bool],
               names: frozenset[str] = frozenset()) -> MemoryContext:
    """`memory` for a request of a conversation that has `brief` (possibly empty): the brief
    goes before the history; the profile is not shown after the history when the brief shows
    it or when it may hold what other conversations said (`profile_elsewhere`: the brief had
    its chance at it, and a tail repeated every turn is what the brief replaces) — a profile
    learned from this conversation alone is shown as without a brief; items from outside the
    conversation (`outside`: the user's other conversations, facts) are offered only when the
    message asks about the past (`asks_past`), or when they say one of the `names` the
    message asks about (`personal.asked_names`: "What are Joanna's hobbies?" is offered what
    the user's other conversations said of Joanna); and nothing the brief shows is offered
    again (by id or by line)."""
    shown_ids, shown_lines = frozenset(brief.item_ids), frozenset(brief.lines)
    named = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(names))) + r")\b") \
        if names else None
    recalled = tuple(
        r for r in memory.recalled
        if (asks_past or not outside(r) or (named is not None and named.search(r.text)))
        and r.id not in shown_ids and split_anchor(one_line(r.text))[1] not in shown_lines)
    profile = None if brief.profile or memory.profile_elsewhere else memory.profile
    return replace(memory, brief=brief.message, brief_tokens=brief.tokens, profile=profile,
                   recalled=recalled)
