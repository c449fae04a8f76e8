"""One recall's assembly from search hits to recollections (gateway/core/recall/assembly.py),
the steps the recaller and the offline simulation share: a few hits in, exact recollections
out."""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest

from gateway.core.recall.assembly import (SUCCESSOR_MAX_CHARS, adjacent, best, fused_order,
                                          recollections)
from gateway.core.recall.ranking import CANDIDATES, FEATURES, Ranker
from gateway.core.recall.recollection import Recollection

TEXTS = ("Where did you go?", "To Paris.", "Nice weather.", "What did you eat?", "Crepes.",
         "Bye.")
IDS = [f"t{n}" for n in range(len(TEXTS))]
ITEMS = {i: Recollection("turn", i, text, (i,), n, 0.0, role="user" if n % 2 else "assistant")
         for n, (i, text) in enumerate(zip(IDS, TEXTS))}


class Link(NamedTuple):
    previous: str | None
    following: str | None


LINKS = {i: Link(IDS[n - 1] if n else None, IDS[n + 1] if n + 1 < len(IDS) else None)
         for n, i in enumerate(IDS)}
PREVIOUS = {i: link.previous for i, link in LINKS.items() if link.previous is not None}
OLDEST_FIRST = Ranker.of({f: -1.0 if f == "place" else 0.0 for f in FEATURES})


def out(*expected: tuple[str, float, float | None]) -> list[Recollection]:
    return [ITEMS[i].changed(score=score, relevance=relevance)
            for i, score, relevance in expected]


def assembled(dense: list[tuple[str, float]], lexical: list[list[tuple[str, float]]],
              top_k: int, items: dict[str, Recollection] = ITEMS, *,
              fusion: dict[str, Any] | None = None, **options: Any) -> list[Recollection]:
    """The recaller's order of calls, with every entry read from the start."""
    ranker = options.get("ranker")
    fused = fused_order(dense, lexical, items, PREVIOUS, ranked=ranker is not None,
                        recency_weight=0.0, **(fusion or {}))
    chosen = best("where?", fused, items, LINKS, top_k=top_k, **options)
    return recollections(chosen, items, fused.similarity, adjacent(LINKS))


DENSE = [("t0", 0.2), ("t3", 0.9)]  # merged by similarity: t3 first


@pytest.mark.parametrize("dense, lexical, top_k, options, expected", [
    # t3 ranks t2 too (its vector holds it); a recalled question brings its answer, t4,
    # whose relevance is its neighbour's similarity
    (DENSE, [], 1, {}, out(("t3", 1 / 21, 0.9), ("t4", 1 / 21, 0.9))),
    (DENSE, [], 1, {"successors": False}, out(("t3", 1 / 21, 0.9))),
    # the second best, t2, asks nothing: no successor; its relevance is t3's
    (DENSE, [], 2, {}, out(("t3", 1 / 21, 0.9), ("t4", 1 / 21, 0.9), ("t2", 1 / 22, 0.9))),
    # a lexical hit ties with the best dense one: the newer first; no dense hit near t5,
    # the lowest similarity stands in
    (DENSE, [[("t5", 2.0)]], 1, {}, out(("t5", 1 / 21, 0.2))),
    # every recalled turn brings the turn after it, or only the questions
    (DENSE, [[("t4", 2.0)]], 1, {"successors_of": "all"},
     out(("t4", 1 / 21, 0.9), ("t5", 1 / 21, 0.2))),
    (DENSE, [[("t4", 2.0)]], 1, {}, out(("t4", 1 / 21, 0.9))),
    # a learned ranking (here: oldest first) re-orders the turns in the fused scores' places
    (DENSE, [], 1, {"ranker": OLDEST_FIRST}, out(("t0", 1 / 21, 0.2), ("t1", 1 / 21, 0.2))),
    # the current topic's items (from t4 on) score twice as high
    ([("t1", 0.9), ("t4", 0.5)], [], 1,
     {"topic_positions": {i: r.position for i, r in ITEMS.items()}, "topic_start": 4,
      "topic_boost": 1.0},
     out(("t4", 1 / 23 * 2.0, 0.5))),
    # no dense hit: relevance unknown
    ([], [[("t2", 1.0)]], 1, {}, out(("t2", 1 / 21, None))),
])
def test_assembly(dense, lexical, top_k, options, expected):
    assert assembled(dense, lexical, top_k, **options) == expected


def test_a_long_reply_is_not_brought_along_by_its_question_but_ranks_on_its_own():
    def with_answer(text: str) -> dict[str, Recollection]:
        return {**ITEMS, "t4": Recollection("turn", "t4", text, ("t4",), 4, 0.0)}

    long = "x" * (SUCCESSOR_MAX_CHARS + 1)
    assert [r.id for r in assembled(DENSE, [], 1, with_answer(long))] == ["t3"]
    assert [r.id for r in assembled(DENSE, [], 1, with_answer(long[1:]))] == ["t3", "t4"]
    # found by a search itself, the long reply is recalled like any turn
    assert [r.id for r in assembled(DENSE, [[("t4", 1.0)]], 2, with_answer(long))] == [
        "t4", "t3"]


def test_a_turn_without_an_item_is_fused_but_never_returned():
    unread = {i: r for i, r in ITEMS.items() if i != "t2"}
    fused = fused_order(DENSE, [], unread, PREVIOUS, recency_weight=0.0)
    assert fused.dense == ["t3", "t2", "t0"]
    assert [i for i, _ in fused.order] == ["t3", "t2", "t0"]
    assert assembled(DENSE, [], 2, unread) == out(("t3", 1 / 21, 0.9), ("t4", 1 / 21, 0.9))
    # read and unusable (excluded by the request), or excluded: not ranked at all
    for dropped in ({"read": set(IDS)}, {"excluded": {"t2"}}):
        fused = fused_order(DENSE, [], unread, PREVIOUS, recency_weight=0.0, **dropped)
        assert fused.dense == ["t3", "t0"]
        assert assembled(DENSE, [], 2, unread, fusion=dropped) == out(
            ("t3", 1 / 21, 0.9), ("t4", 1 / 21, 0.9), ("t0", 1 / 22, 0.2), ("t1", 1 / 22, 0.2))


def test_fusion_options_of_an_experiment():
    # without context the dense hits rank only themselves; a lexical weight scales BM25's share
    fused = fused_order(DENSE, [[("t5", 1.0)]], ITEMS, PREVIOUS, recency_weight=0.0,
                        context=False, lexical_weight=0.5)
    assert fused.order == [("t3", 1 / 21), ("t0", 1 / 22), ("t5", 0.5 / 21)]
    rescored = fused_order(DENSE, [], ITEMS, PREVIOUS, recency_weight=0.0,
                           rescore=lambda hits: hits[::-1])
    assert [i for i, _ in rescored.order] == ["t0", "t2", "t3"]


def test_a_ranked_order_is_capped_at_the_candidates_the_ranking_weighs():
    many = {f"x{n}": Recollection("turn", f"x{n}", "hi", (f"x{n}",), n, 0.0)
            for n in range(CANDIDATES + 100)}
    dense = [(i, 1.0 - n / 1000) for n, i in enumerate(many)]
    assert len(fused_order(dense, [], many, {}).order) == CANDIDATES + 100
    assert len(fused_order(dense, [], many, {}, ranked=True).order) == CANDIDATES
