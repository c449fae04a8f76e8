"""Fitting memory into its share of the budget: which summary chunks and which recollections
go before the model (the rewrite decides the shares; see gateway/core/context/rewrite.py).

The definition of packing is to render a block and measure it (`count_message`) for every
candidate set; done so, packing is quadratic in the candidates. Here a block is priced by
arithmetic instead: a block's text is its frame (message, header, tags) plus its items, each
ending in a newline, and the tokenizers in use never merge tokens across a newline into the
next line (tiktoken's encodings split text before tokenising it; so does counting words), so
a block costs its frame plus the sum of its items. Each item is counted once (the tokenizer
may cache the count), so packing is linear in the candidates. The block chosen is rendered
once and measured as rendered: the budget holds exactly whatever the tokenizer; should a
tokenizer not add up (the measure differs from the price), the definition is applied. A
tokenizer that declares it adds up by line (`adds_up_by_line`) is not measured for the
recalled block, whose lines are one-line texts (summary chunks span several lines: still
measured).
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from dataclasses import dataclass
from typing import Generic, Sequence, TypeVar

from gateway.core.context.blocks import (
    BLOCK_ROLE,
    ENGLISH,
    RECALLED_TAG,
    SUMMARY_TAG,
    Framing,
    block_frame,
    date_line,
    escape_tag,
    item_line,
    one_line,
    reading_key,
    recalled_block,
    recalled_in_reading_order,
    render_profile,
    render_recalled,
    render_summary,
    split_anchor,
    summary_parts,
)
from gateway.core.messages import Message
from gateway.core.recall.recollection import Recollection
from gateway.core.text.tokens import Tokenizer, count_message

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


def _frame_cost(header: str, tag: str, tokenizer: Tokenizer) -> int:
    """What a block costs beside its items: the message, the header and the tags."""
    opening, closing = block_frame(header, tag)
    return count_message(Message(BLOCK_ROLE, opening), tokenizer) + tokenizer.count(closing)


# --- the summary block ------------------------------------------------------------------------

def pack_summary(chunks: Sequence[str], limit: int, tokenizer: Tokenizer,
                 framing: Framing = ENGLISH) -> Packed[str]:
    """The longest run of newest chunks whose block fits `limit`, shown oldest first. The run
    is unbroken up to the newest chunk, so the block never skips a stretch of the conversation
    (an older chunk is dropped before a newer one). Nothing when not even the newest fits.

    Priced by arithmetic, newest chunk first; the block chosen and the block one chunk longer
    (the first that does not fit) are measured as rendered."""
    usable = tuple(c for c in chunks if c and c.strip())
    parts = summary_parts(usable)
    if not usable or len(parts) != len(usable):  # the latter never (see summary_parts)
        return _pack_summary_by_measure(usable, limit, tokenizer, framing)
    price = _frame_cost(framing.summary, SUMMARY_TAG, tokenizer) + tokenizer.count(
        parts[-1] + "\n")
    k = 0
    if price <= limit:
        k = 1
        for part in reversed(parts[:-1]):
            more = tokenizer.count(part + "\n\n")
            if price + more > limit:
                break
            price, k = price + more, k + 1
    packed: Packed[str] = Packed()
    if k:
        block = render_summary(usable[-k:], framing)
        assert block is not None
        if count_message(block, tokenizer) != price:
            return _pack_summary_by_measure(usable, limit, tokenizer, framing)
        packed = Packed(block, price, usable[-k:])
    if k < len(usable):  # the next longer run must not fit, as priced
        longer = render_summary(usable[-k - 1:], framing)
        if longer is not None and count_message(longer, tokenizer) <= limit:
            return _pack_summary_by_measure(usable, limit, tokenizer, framing)
    return packed


def _pack_summary_by_measure(usable: tuple[str, ...], limit: int, tokenizer: Tokenizer,
                             framing: Framing = ENGLISH) -> Packed[str]:
    """The definition of `pack_summary`: each run measured as rendered, longest first."""
    for k in range(len(usable), 0, -1):
        block = render_summary(usable[-k:], framing)
        if block is not None and (cost := count_message(block, tokenizer)) <= limit:
            return Packed(block, cost, usable[-k:])
    return Packed()


def pack_profile(profile: str | None, limit: int, tokenizer: Tokenizer,
                 framing: Framing = ENGLISH) -> Packed[str]:
    block = render_profile(profile, framing)
    if block is None or (cost := count_message(block, tokenizer)) > limit:
        return Packed()
    return Packed(block, cost, (profile or "",))


# --- the recalled block -----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RecalledLine:
    """A recollection as the recalled block shows it, priced once for the whole rewrite."""

    item: Recollection
    text: str
    """`one_line(item.text)`: blank for an item that is never shown."""
    anchor: str | None
    """Its date anchor, shown on a date line above it (once for items in a row sharing it)."""
    rest: str
    """Its text without the anchor: what redundancy is judged on."""
    cost: int
    """Tokens of its line in the block, newline included (0 for a blank item)."""


def recalled_lines(recalled: Sequence[Recollection],
                   tokenizer: Tokenizer) -> tuple[RecalledLine, ...]:
    """Each recollection with its line, in rank order."""
    out = []
    for r in recalled:
        text = one_line(r.text)
        anchor, rest = split_anchor(text)
        cost = tokenizer.count(escape_tag(item_line(rest), RECALLED_TAG) + "\n") if text else 0
        out.append(RecalledLine(r, text, anchor, rest, cost))
    return tuple(out)


def drop_redundant(recalled: Sequence[RecalledLine], window_ids: frozenset[str],
                   summary: Sequence[str],
                   shown_texts: frozenset[str] = frozenset()) -> tuple[RecalledLine, ...]:
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
    for line in recalled:
        r, text = line.item, line.rest
        shown = r.kind != "fact" and (
            (r.kind == "turn" and r.id in window_ids)
            or (bool(r.source_ids) and window_ids.issuperset(r.source_ids))
            or (r.kind == "chunk" and line.text in summary_texts)
            or (bool(text) and text in texts))
        if not shown and (r.kind, r.id) not in seen:
            kept.append(line)
            seen.add((r.kind, r.id))
            if r.kind != "fact" and text:
                texts.add(text)
    return tuple(kept)


def shown_texts(messages: Sequence[Message]) -> frozenset[str]:
    """The one-line texts of messages before the model (what `drop_redundant` compares)."""
    return frozenset(t for m in messages if (t := one_line(m.text)))


def recall_reservation(recalled: Sequence[RecalledLine], limit: int,
                       tokenizer: Tokenizer, framing: Framing = ENGLISH) -> int:
    """What to hold back from the recent window for recalled items: `limit`, or the cost of
    showing all of them if that is less; nothing without recollections. Priced, not measured:
    it decides how the room is shared, never whether the prompt fits."""
    usable = [line for line in recalled if line.text]
    if not usable:
        return 0
    return max(0, min(limit, _RecalledPrices(usable, tokenizer, framing).whole()))


def pack_recalled(recalled: Sequence[RecalledLine], limit: int,
                  tokenizer: Tokenizer, framing: Framing = ENGLISH, *,
                  large_last: bool = False) -> Packed[Recollection]:
    """Best first: each recollection, in rank order, that the block can take and still fit
    `limit`. Items are independent, so one that does not fit is skipped and the next (smaller)
    ones are tried. With `large_last`, an item whose line costs more than half of `limit` —
    one that leaves no room for another as large — is tried after the others (each group in
    rank order). The block shows them in reading order (see `render_recalled`).

    Priced by arithmetic in one pass over the items; the block chosen (or, when nothing fits,
    the best item's) is rendered and measured once."""
    usable = [line for line in recalled if line.text]
    if large_last and any(2 * line.cost > limit for line in usable):
        usable = [line for line in usable if 2 * line.cost <= limit] \
            + [line for line in usable if 2 * line.cost > limit]
    if not usable:
        return Packed()
    prices = _RecalledPrices(usable, tokenizer, framing)
    chosen, price = prices.pack(limit)
    if adds_up_by_line(tokenizer):
        # The price is the count (the block's lines are one-line texts): nothing to measure.
        # A new question recalls a new block, so measuring it was a full count per request.
        if not chosen:
            return Packed()
        kept = sorted((usable[i] for i in chosen), key=lambda line: reading_key(line.item))
        return Packed(recalled_block([(line.anchor, line.rest) for line in kept], framing),
                      price, tuple(line.item for line in kept))
    # Measured as rendered: the block chosen, or when none is, the best item's block —
    # rendered from the lines already split (what `render_recalled` of their items gives).
    kept = sorted((usable[i] for i in chosen or [0]), key=lambda line: reading_key(line.item))
    block = recalled_block([(line.anchor, line.rest) for line in kept], framing)
    if count_message(block, tokenizer) != (price if chosen else prices.alone(0)):
        return _pack_recalled_by_measure([line.item for line in usable], limit, tokenizer,
                                         framing)
    return Packed(block, price, tuple(line.item for line in kept)) if chosen else Packed()


def adds_up_by_line(tokenizer: Tokenizer) -> bool:
    """Whether `tokenizer` declares that text made of lines that neither start nor end with a
    blank, nor start with "/", costs the sum of its lines, each counted with its newline
    (`adds_up_by_line = True`, as the tiktoken adapter does): then a recalled block — its
    lines are "- " + a one-line text or a "[date]", between a frame that ends and starts at a
    line — costs exactly its price. Undeclared, the block is measured."""
    return getattr(tokenizer, "adds_up_by_line", False) is True


def _pack_recalled_by_measure(usable: list[Recollection], limit: int, tokenizer: Tokenizer,
                              framing: Framing = ENGLISH) -> Packed[Recollection]:
    """The definition of `pack_recalled`: the block rendered and measured for every
    candidate."""
    kept: list[Recollection] = []
    packed: Packed[Recollection] = Packed()
    for item in usable:
        block = render_recalled(kept + [item], framing)
        if block is not None and (cost := count_message(block, tokenizer)) <= limit:
            kept.append(item)
            packed = Packed(block, cost, recalled_in_reading_order(kept))
    return packed


class _RecalledPrices:
    """Prices of recalled blocks made of some of `usable` (non-blank lines, in rank order).

    A block is its frame, then per item in reading order a date line when its anchor differs
    from the item before it, and its own line. Adding an item to a chosen set changes the
    price by its own line, its date line (if the item before it has another anchor) and the
    date line of the item after it (which may now share its anchor, or no longer share the
    anchor of the one before): known from its two neighbours in reading order."""

    __slots__ = ("anchors", "dates", "frame", "lines", "position")

    def __init__(self, usable: list[RecalledLine], tokenizer: Tokenizer,
                 framing: Framing = ENGLISH) -> None:
        self.lines = usable
        self.frame = _frame_cost(framing.recalled, RECALLED_TAG, tokenizer)
        # sorted() is stable, as in `recalled_in_reading_order`: ties keep their rank order.
        reading = sorted(range(len(usable)), key=lambda i: reading_key(usable[i].item))
        self.position = [0] * len(usable)
        for place, i in enumerate(reading):
            self.position[i] = place
        self.anchors = [usable[i].anchor for i in reading]
        """Anchor of each item, by place in reading order."""
        self.dates = {a: tokenizer.count(escape_tag(date_line(a), RECALLED_TAG) + "\n")
                      for a in dict.fromkeys(self.anchors) if a is not None}

    def _date(self, anchor: str | None, before: str | None) -> int:
        return self.dates[anchor] if anchor is not None and anchor != before else 0

    def whole(self) -> int:
        """The price of the block of all the items."""
        total, before = self.frame, None
        for anchor in self.anchors:
            total += self._date(anchor, before)
            before = anchor
        return total + sum(line.cost for line in self.lines)

    def alone(self, i: int) -> int:
        """The price of the block of item `i` alone."""
        return self.frame + self._date(self.anchors[self.position[i]], None) + self.lines[i].cost

    def pack(self, limit: int) -> tuple[list[int], int]:
        """(the items taken, as indexes in rank order; the block's price), taking in rank order
        each item with which the block still fits `limit`."""
        chosen: list[int] = []
        places: list[int] = []  # the places of the chosen items in reading order, sorted
        total = self.frame
        for i, line in enumerate(self.lines):
            place = self.position[i]
            at = bisect_left(places, place)
            before = self.anchors[places[at - 1]] if at else None
            anchor = self.anchors[place]
            more = line.cost + self._date(anchor, before)
            if at < len(places):
                after = self.anchors[places[at]]
                more += self._date(after, anchor) - self._date(after, before)
            if total + more <= limit:
                chosen.append(i)
                insort(places, place)
                total += more
        return chosen, total

