"""An absolute relevance for each recalled item, and the floor below which an item is not
forwarded.

Why: recall's order (fusion, the learned ranking) is relative — the best of irrelevant items is
still first — so without a floor the recalled block fills its share of the budget even for
"Thanks, that's all!". The dense similarity of the question's embedding to an item's is on one
scale per embedder: unrelated text scores low whatever else is stored.

An item's relevance is the largest dense similarity of itself and of its neighbours in its
conversation (the turn before and the turn after): a turn comes back as the answer after a
recalled question, or as the context before a dense hit, because of its neighbour, and a
turn's vector embeds the turn before it too. An item that was no dense hit (found lexically
only, or a neighbour beyond the search's depth) is given the lowest dense hit's similarity —
at most what it would score, since the search returns the best. With no dense hit at all
(nothing searched densely) relevance is unknown (None) and the item is kept.

Two thresholds: the floor, below which an item is not forwarded, and the gate: when not one
item reaches it, nothing stored is about the question and none is forwarded. Both are per
embedder (each scores unrelated text in its own band: gateway/memory/embedders/), calibrated by
leave-one-conversation-out on the dev sets (bench/README.md, "Recall only when relevant").
What clears the gate also sizes the recall: at most `per_relevant` items per item that reaches
the gate. One item barely over it (a general request that comes close to one stored turn) is a
weak licence: without the cap every item above the floor came with it and filled the recall
tail (bench/README.md, "A weak licence recalls little").

What the message asks of memory (`gateway/core/recall/need.py`) comes first: nothing is
forwarded for a message that needs none, and the gate does not apply to one about the past.

Invariants: pure; the order and every other field of the items are kept; an item with unknown
relevance is never dropped (but for a message that needs no memory); no floor and no gate
(None) drop nothing.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from gateway.core.recall.need import Need
from gateway.core.recall.recollection import Recollection


def with_relevance(items: Iterable[Recollection], similarity: Mapping[str, float],
                   adjacent: Iterable[tuple[str, str]]) -> tuple[Recollection, ...]:
    """`items` with `relevance` set (`relevances`)."""
    items = tuple(items)
    if not similarity:
        return items
    relevance = relevances([item.id for item in items], similarity, adjacent)
    return tuple(item.changed(relevance=relevance[item.id]) for item in items)


def relevances(ids: Iterable[str], similarity: Mapping[str, float],
               adjacent: Iterable[tuple[str, str]]) -> dict[str, float]:
    """The relevance of each of `ids`: the largest dense similarity of itself and of its
    neighbours, the lowest dense hit's standing in for any that was no hit; empty when there
    is no dense hit (relevance unknown). `similarity`: the dense hits' similarities by id;
    `adjacent`: pairs of ids of consecutive turns (earlier, later), where known — only the
    pairs that hold one of `ids` are weighed (a recall's links hold every turn it read)."""
    if not similarity:
        return {}
    lowest = min(similarity.values())
    sim = similarity.get
    best = {i: sim(i, lowest) for i in ids}
    for earlier, later in adjacent:  # a neighbour's similarity counts for both
        if earlier in best and best[earlier] < (other := sim(later, lowest)):
            best[earlier] = other
        if later in best and best[later] < (other := sim(earlier, lowest)):
            best[later] = other
    return best


def above_floor(items: Sequence[Recollection], floor: float | None,
                gate: float | None = None, need: Need = Need.OPEN,
                per_relevant: int = 0) -> tuple[Recollection, ...]:
    """The items worth forwarding: those whose relevance is at or above `floor` — none of
    them when not one reaches `gate` (nothing stored is about the question), and of those the
    first `per_relevant` × (how many reach `gate`) in order (0: all) — and those whose
    relevance is unknown. `need`: what the message asks of memory (`Need.NONE`: nothing is
    forwarded; `Need.PAST`: no gate, so no cap)."""
    if need is Need.NONE:
        return ()
    if need is Need.PAST:
        gate = None
    known = [r.relevance for r in items if r.relevance is not None]
    if gate is not None and known and max(known) < gate:
        return tuple(r for r in items if r.relevance is None)
    kept = tuple(r for r in items
                 if floor is None or r.relevance is None or r.relevance >= floor)
    if gate is None or per_relevant <= 0:
        return kept
    return _capped(kept, per_relevant * sum(1 for r in known if r >= gate))


def _capped(items: Sequence[Recollection], cap: int) -> tuple[Recollection, ...]:
    """The first `cap` items of known relevance, in order, and every item of unknown
    relevance."""
    out: list[Recollection] = []
    for r in items:
        if r.relevance is None:
            out.append(r)
        elif cap > 0:
            out.append(r)
            cap -= 1
    return tuple(out)
