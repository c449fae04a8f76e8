"""Recalled pages: items a page long or more (an assistant's long replies) are offered after
the shorter ones, unless the message asks what the assistant said.

Beyond the window the recalled block is a few hundred tokens; one page-long reply ranked near
the top takes the room of several short turns, and what a user asks about is mostly what the
user said (their facts, plans, preferences: short turns). A message that asks about the
assistant's own words ("you recommended…", "remind me…", "你推荐过…") keeps the ranking's order,
so the reply it asks about goes first (`need.asks_what_you_said`). A page is `SUCCESSOR_MAX_CHARS` characters, the length
above which a recalled question does not bring its answer either
(gateway/core/recall/assembly.py). Why and what it is worth: docs/decisions.md, "Recalled
pages go last".

Invariants: pure; the order within the shorter items and within the pages is the ranking's;
nothing is added or dropped; without a page, or for a message that asks what the assistant
said, the items come back as they are.
"""

from __future__ import annotations

from typing import Sequence

from gateway.core.recall.assembly import SUCCESSOR_MAX_CHARS
from gateway.core.recall.need import asks_what_you_said
from gateway.core.recall.recollection import Recollection

PAGE_CHARS = SUCCESSOR_MAX_CHARS


def pages_last(items: Sequence[Recollection], message: str) -> tuple[Recollection, ...]:
    """`items` (in rank order) with those of `PAGE_CHARS` characters or more after the others,
    unless `message` asks what the assistant said (see the module docstring)."""
    items = tuple(items)
    pages = [r for r in items if len(r.text) >= PAGE_CHARS]
    if not pages or asks_what_you_said(message):
        return items
    return tuple(r for r in items if len(r.text) < PAGE_CHARS) + tuple(pages)
