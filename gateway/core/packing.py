"""Fitting memory into its share of the budget: which summary chunks and which recollections
go before the model (the rewrite decides the shares; see gateway/core/rewrite.py).

A block is always measured as rendered (`count_message` of the block message), never as a sum
of its items' costs: the shared wrapper and the tokenizer's merges across item boundaries make
the parts not add up exactly, and the budget must hold exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Generic, Sequence, TypeVar

from gateway.core.memory import (
    date_line,
    item_line,
    one_line,
    recalled_in_reading_order,
    render_profile,
    render_recalled,
    render_summary,
    split_anchor,
)
from gateway.core.messages import Message
from gateway.core.recall import Recollection
from gateway.core.tokens import Tokenizer, count_message

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Packed(Generic[T]):
    """A block and what went into it, in the order shown; no block at all when nothing fits."""

    block: Message | None = None
    cost: int = 0
    """count_message(block), 0 without a block."""
    items: tuple[T, ...] = ()


def share(fraction: float, room: int) -> int:
    """Tokens granted by a share of `room` (rounded down, never negative)."""
    return max(0, math.floor(fraction * room))


def pack_summary(chunks: Sequence[str], limit: int, tokenizer: Tokenizer) -> Packed[str]:
    """The longest run of newest chunks whose block fits `limit`, shown oldest first. The run
    is unbroken up to the newest chunk, so the block never skips a stretch of the conversation
    (an older chunk is dropped before a newer one). Nothing when not even the newest fits."""
    usable = tuple(c for c in chunks if c and c.strip())
    for k in range(len(usable), 0, -1):  # everything usually fits: then one measure
        block = render_summary(usable[-k:])
        if block is not None and (cost := count_message(block, tokenizer)) <= limit:
            return Packed(block, cost, usable[-k:])
    return Packed()


def pack_profile(profile: str | None, limit: int, tokenizer: Tokenizer) -> Packed[str]:
    block = render_profile(profile)
    if block is None or (cost := count_message(block, tokenizer)) > limit:
        return Packed()
    return Packed(block, cost, (profile or "",))


def recall_reservation(recalled: Sequence[Recollection], limit: int,
                       tokenizer: Tokenizer) -> int:
    """What to hold back from the recent window for recalled items: `limit`, or the cost of
    showing all of them if that is less; nothing without recollections."""
    block = render_recalled(recalled)
    return 0 if block is None else max(0, min(limit, count_message(block, tokenizer)))


def drop_redundant(recalled: Sequence[Recollection], window_ids: frozenset[str],
                   summary: Sequence[str],
                   shown_texts: frozenset[str] = frozenset()) -> tuple[Recollection, ...]:
    """The recollections not already before the model, in rank order. Dropped: a turn whose id
    is a message id of the recent window; a turn or chunk all of whose (non-empty) source ids
    are; a chunk whose text is a summary chunk being forwarded; a turn or chunk whose text
    (without its date anchor, on one line) is one of `shown_texts` (the window's messages, so
    a reply that repeats its question verbatim is not shown again) or that of an item ranked
    higher; a repeat of an item (same kind and id) ranked higher. Facts are never redundant
    with the window: it does not state them."""
    summary_texts = {one_line(s) for s in summary}
    seen: set[tuple[str, str]] = set()
    texts = set(shown_texts)
    kept = []
    for r in recalled:
        text = split_anchor(one_line(r.text))[1]
        shown = r.kind != "fact" and (
            (r.kind == "turn" and r.id in window_ids)
            or (bool(r.source_ids) and window_ids.issuperset(r.source_ids))
            or (r.kind == "chunk" and one_line(r.text) in summary_texts)
            or (bool(text) and text in texts))
        if not shown and (r.kind, r.id) not in seen:
            kept.append(r)
            seen.add((r.kind, r.id))
            if r.kind != "fact" and text:
                texts.add(text)
    return tuple(kept)


def shown_texts(messages: Sequence[Message]) -> frozenset[str]:
    """The one-line texts of messages before the model (what `drop_redundant` compares)."""
    return frozenset(t for m in messages if (t := one_line(m.text)))


def pack_recalled(recalled: Sequence[Recollection], limit: int,
                  tokenizer: Tokenizer) -> Packed[Recollection]:
    """Best first: each recollection, in rank order, that the block can take and still fit
    `limit`. Items are independent, so one that does not fit is skipped and the next (smaller)
    ones are tried. The block shows them in reading order (see `render_recalled`)."""
    usable = [r for r in recalled if r.text.strip()]
    block = render_recalled(usable)
    if block is None:
        return Packed()
    if (cost := count_message(block, tokenizer)) <= limit:  # the usual case: one measure
        return Packed(block, cost, recalled_in_reading_order(usable))
    return _pack_by_lines(usable, limit, tokenizer) or _pack_by_measure(usable, limit, tokenizer)


def _pack_by_measure(usable: list[Recollection], limit: int,
                     tokenizer: Tokenizer) -> Packed[Recollection]:
    """The definition of packing: render and measure the block for every candidate."""
    kept: list[Recollection] = []
    packed: Packed[Recollection] = Packed()
    for item in usable:
        block = render_recalled(kept + [item])
        if block is not None and (cost := count_message(block, tokenizer)) <= limit:
            kept.append(item)
            packed = Packed(block, cost, recalled_in_reading_order(kept))
    return packed


def _pack_by_lines(usable: list[Recollection], limit: int,
                   tokenizer: Tokenizer) -> Packed[Recollection] | None:
    """The same packing as `_pack_by_measure`, in one measure instead of one per candidate.

    The block's lines (an item's, a date's) each end in a newline, and the BPE tokenizers in
    use never merge tokens across a newline into the next line, so a block costs a constant
    plus the sum of its lines' costs: each candidate is priced by arithmetic. The result is
    measured once as rendered; if the tokenizer did not add up (None), the caller measures.
    """
    lines = [split_anchor(one_line(r.text)) for r in usable]
    item_cost = [tokenizer.count(item_line(rest) + "\n") for _, rest in lines]
    date_cost = {a: tokenizer.count(date_line(a) + "\n") for a, _ in lines if a is not None}
    order = {id(r): i for i, r in enumerate(recalled_in_reading_order(usable))}

    def lines_cost(chosen: list[int]) -> int:
        total, current = 0, None
        for i in sorted(chosen, key=lambda i: order[id(usable[i])]):
            anchor = lines[i][0]
            if anchor is not None and anchor != current:
                total += date_cost[anchor]
            current = anchor
            total += item_cost[i]
        return total

    first = render_recalled(usable[:1])
    assert first is not None
    constant = count_message(first, tokenizer) - lines_cost([0])
    chosen: list[int] = []
    for i in range(len(usable)):
        if constant + lines_cost(chosen + [i]) <= limit:
            chosen.append(i)
    if not chosen:
        return Packed()
    kept = [usable[i] for i in chosen]
    block = render_recalled(kept)
    assert block is not None
    cost = count_message(block, tokenizer)
    if cost != constant + lines_cost(chosen):
        return None
    return Packed(block, cost, recalled_in_reading_order(kept))
