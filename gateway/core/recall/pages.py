"""Recalled pages: items a page long or more (an assistant's long replies) are offered after
the shorter ones, unless the message asks what the assistant said.

Beyond the window the recalled block is a few hundred tokens; one page-long reply ranked near
the top takes the room of several short turns, and what a user asks about is mostly what the
user said (their facts, plans, preferences: short turns). A message that asks about the
assistant's own words ("you recommended…", "remind me…", "你推荐过…") keeps the ranking's order,
so the reply it asks about goes first. A page is `SUCCESSOR_MAX_CHARS` characters, the length
above which a recalled question does not bring its answer either
(gateway/core/recall/assembly.py). Why and what it is worth: docs/decisions.md, "Recalled
pages go last".

Invariants: pure; the order within the shorter items and within the pages is the ranking's;
nothing is added or dropped; without a page, or for a message that asks what the assistant
said, the items come back as they are.
"""

from __future__ import annotations

import re
from typing import Sequence

from gateway.core.recall.assembly import SUCCESSOR_MAX_CHARS
from gateway.core.recall.recollection import Recollection

PAGE_CHARS = SUCCESSOR_MAX_CHARS

_YOU_SAID = re.compile(
    r"\b(?:you(?: had| have|'d|'ve)? (?:mentioned|suggested|recommended|told|said|gave|"
    r"listed|created|wrote|written|provided|shared|named|described|explained|proposed|"
    r"showed|offered|advised|came up with|put together|made)|"
    r"did you (?:mention|suggest|recommend|tell|say|give|list|create|write|provide|share|name|"
    r"describe|explain|propose|show|offer|advise|make)|"
    r"remind me|your (?:previous |earlier |last |first )?"
    r"(?:answer|reply|response|suggestion|recommendation|list|advice)s?)\b"
    r"|你(?:之前|上次|刚才|以前|曾经)?(?:说|提到|提过|推荐|建议|告诉|讲|列|写|给我)")
_READ = 400
"""Characters read from the message's end, where its question stands (as `need.memory_need`)."""


def asks_what_you_said(message: str) -> bool:
    """Whether `message` asks about what the assistant said or made before (second person and
    a verb of saying or giving in the past, "remind me", "your answer", or their Chinese
    forms)."""
    return bool(_YOU_SAID.search(message[-_READ:].replace("\u2019", "'").lower()))


def pages_last(items: Sequence[Recollection], message: str) -> tuple[Recollection, ...]:
    """`items` (in rank order) with those of `PAGE_CHARS` characters or more after the others,
    unless `message` asks what the assistant said (see the module docstring)."""
    items = tuple(items)
    pages = [r for r in items if len(r.text) >= PAGE_CHARS]
    if not pages or asks_what_you_said(message):
        return items
    return tuple(r for r in items if len(r.text) < PAGE_CHARS) + tuple(pages)
