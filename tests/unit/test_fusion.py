"""Reciprocal-rank fusion with a mild recency weight."""

import pytest

from gateway.core.recall.fusion import (RRF_K, asks, fuse, reciprocal_rank_fusion, with_context,
                                 with_successors)


def test_rrf_sums_over_lists_and_counts_a_repeat_once():
    scores = reciprocal_rank_fusion([["a", "b", "a"], ["b"]], k=60)
    assert scores == pytest.approx({"a": 1 / 61, "b": 1 / 62 + 1 / 61})


@pytest.mark.parametrize("rankings, positions, expected", [
    # found by both searches beats found by one
    ([["a", "b"], ["b", "c"]], {}, ["b", "a", "c"]),
    # first in both beats second in both, even when much older
    ([["old", "new"], ["old", "new"]], {"old": 3, "new": 299}, ["old", "new"]),
    # a near-tie goes to the newer item
    ([["old", "x"], ["new", "y"]], {"old": 3, "new": 299, "x": 10, "y": 20},
     ["new", "old", "y", "x"]),
    # an exact tie without positions is broken by id
    ([["b"], ["a"]], {}, ["a", "b"]),
    ([], {}, []),
])
def test_fused_order(rankings, positions, expected):
    assert [i for i, _ in fuse(rankings, positions)] == expected


def test_recency_weight_is_at_most_the_configured_share():
    fused = dict(fuse([["old"], ["new"]], {"old": 0, "new": 100}, recency_weight=0.01))
    assert fused["new"] / fused["old"] == pytest.approx(1.01)


def test_items_without_a_position_get_no_boost():
    fused = dict(fuse([["f", "x"], ["t"]], {"t": 100, "x": 0, "f": -1}))
    assert fused["f"] == pytest.approx(1 / (RRF_K + 1))
    assert fused["t"] == pytest.approx(1.01 / (RRF_K + 1))


def test_a_dense_hit_ranks_the_turn_before_it_right_after_it():
    assert with_context(["b", "d", "a"], {"b": "a", "d": "c"}) == ["b", "a", "d", "c"]
    assert with_context([], {"b": "a"}) == []


def test_each_item_is_followed_by_its_successor_at_its_score_unless_ranked_higher():
    ranked = [("a", 0.9), ("c", 0.5), ("b", 0.4)]
    assert with_successors(ranked, {"a": "b", "c": "d", "x": "y"}) == [
        ("a", 0.9), ("b", 0.9), ("c", 0.5), ("d", 0.5)]


def test_fuse_does_not_mutate_its_inputs():
    rankings, positions = [["a", "b"], ["b"]], {"a": 1, "b": 2}
    fuse(rankings, positions)
    assert rankings == [["a", "b"], ["b"]] and positions == {"a": 1, "b": 2}


@pytest.mark.parametrize("text, expected", [
    ("Where do you walk on Sundays?", True),
    ("[8 May, 2023] Ana: Nice! What did you paint? I love it.", True),
    ("你周末通常去哪里散步？", True),
    ("أين تسكن؟", True),
    ("We walk along the lake with Rex.", False),
    ("我们带着小狗去西湖边散步。", False),
    ("", False),
])
def test_a_turn_asks_when_it_holds_a_question_mark(text, expected):
    assert asks(text) is expected


def test_a_ranking_weighs_by_its_weight():
    scores = reciprocal_rank_fusion([["a", "b"], ["b"]], k=10, weights=[1.0, 0.5])
    assert scores == pytest.approx({"a": 1 / 11, "b": 1 / 12 + 0.5 / 11})
    # Weight 0: the ranking's items are kept (at score 0) but it never reorders the others.
    assert [i for i, _ in fuse([["a", "b"], ["b", "c"]], {}, weights=[1.0, 0.0])] == [
        "a", "b", "c"]


def test_weights_must_match_the_rankings():
    with pytest.raises(ValueError):
        reciprocal_rank_fusion([["a"], ["b"]], weights=[1.0])
