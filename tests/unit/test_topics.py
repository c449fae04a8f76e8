"""The pure topic decisions (gateway/core/memory/topics.py), the header encoding of a label, and the
compaction plan of a finished topic — table-driven, no I/O."""

from __future__ import annotations

import urllib.parse

import pytest

from gateway.core.memory.compaction import CompactionPolicy, plan_compaction
from gateway.core.memory.topics import (
    TopicPolicy, TopicSegment, boost_same_topic, counted_turn, is_switch, may_switch, on_branch,
    same_topic, started, switched, topic_label)
from gateway.ops.observability import header_text

POLICY = TopicPolicy(min_turns=2)


@pytest.mark.parametrize("similarities, threshold, expected", [
    ([0.1, 0.2], 0.3, True),    # unrelated to every turn of the window: a new topic
    ([0.1, 0.5], 0.3, False),   # related to one of them is enough to stay
    ([0.3], 0.3, False),        # at the threshold: the same topic
    ([], 0.3, False),           # nothing to compare with: no switch
])
def test_a_switch_is_a_message_unrelated_to_every_turn_of_the_window(similarities, threshold,
                                                                     expected):
    assert is_switch(similarities, threshold) is expected


def test_segments_stay_contiguous_and_a_topic_needs_min_turns_before_it_can_end():
    segments = started("m0")
    assert not may_switch(segments, POLICY)
    segments = counted_turn(counted_turn(segments))
    assert may_switch(segments, POLICY)
    segments = switched(segments, 6, "m6", "embedding", POLICY)
    first, second = segments
    assert (first.start, first.end, first.turns) == (0, 5, 2)
    assert (second.index, second.start, second.end, second.turns) == (1, 6, None, 1)
    assert second.current and not first.current and second.method == "embedding"
    assert not may_switch(segments, POLICY)  # the new topic needs its own turns first
    with pytest.raises(ValueError):
        switched(segments, 6, "m6", "embedding", POLICY)  # not after the current one


def test_history_is_capped_oldest_first():
    policy = TopicPolicy(min_turns=1, max_segments=2)
    segments = started("m0")
    for position in (2, 4, 6):
        segments = switched(counted_turn(segments), position, f"m{position}", "llm", policy)
    assert [s.index for s in segments] == [2, 3] and segments[-1].start == 6


def test_a_fork_keeps_only_the_segments_still_on_the_branch_and_reopens_the_last():
    segments = switched(counted_turn(counted_turn(started("a"))), 4, "e", "embedding", POLICY)
    assert on_branch(segments, ["a", "b", "c", "d", "e", "f"]) == segments
    kept = on_branch(segments, ["a", "b", "c", "d", "E'", "f"])  # message 4 was edited
    assert len(kept) == 1 and kept[0].current and kept[0].start_id == "a"
    assert on_branch(segments, ["x"]) == ()


def test_segments_round_trip_through_json_and_bad_json_is_a_value_error():
    segment = TopicSegment(3, "北京、天气", 10, "m10", 19, "llm", 4)
    assert TopicSegment.from_json(segment.to_json()) == segment
    for bad in ({}, {"index": 1, "start": 0}, {"index": 1, "start": 0, "start_id": "a",
                                               "method": "guess"}):
        with pytest.raises(ValueError):
            TopicSegment.from_json(bad)


@pytest.mark.parametrize("texts, background, expected", [
    (["I am training for the Berlin marathon.", "Marathon training: long runs on Sunday.",
      "Which shoes for marathon runs?"], ["yeah really cool", "really, training is hard"],
     "marathon runs berlin"),
    (["我想去北京看看天气", "北京天气冷吗", "北京的天气下雪了"], [], "北京、天气、想去"),
    (["ok, thanks!", "42 42"], [], ""),  # chat filler and numbers are no topic
    ([], [], ""),
])
def test_a_label_is_the_topics_salient_words_in_any_script(texts, background, expected):
    assert topic_label(texts, 3, background=background) == expected


def test_a_label_weighs_words_by_their_rarity_in_the_rest_of_the_conversation():
    texts = ["Caroline: the sourdough is great", "Caroline: sourdough starter", "Caroline: yes"]
    assert topic_label(texts, 1) == "caroline"  # on its own, the most used word
    # A name said all along is not what this topic is about.
    assert topic_label(texts, 1, background=["Caroline: hi"] * 20) == "sourdough"


def test_the_boost_lifts_only_the_current_topics_items_and_zero_changes_nothing():
    ranked = [("old", 0.10), ("new", 0.095), ("other", 0.05)]
    same = same_topic({"old": 3, "new": 12, "other": 8}, topic_start=10)
    assert same == {"new"}
    assert [i for i, _ in boost_same_topic(ranked, same, 0.1)] == ["new", "old", "other"]
    assert boost_same_topic(ranked, same, 0.0) == ranked
    assert same_topic({"a": 1}, None) == frozenset()


@pytest.mark.parametrize("label, header", [
    ("marathon training", "marathon training"),
    ("北京 天气", "UTF-8''%E5%8C%97%E4%BA%AC%20%E5%A4%A9%E6%B0%94"),
    ("café\nline", "UTF-8''caf%C3%A9%0Aline"),
])
def test_a_label_becomes_an_ascii_header_value(label, header):
    value = header_text(label)
    assert value == header and value.isascii()
    assert urllib.parse.unquote(value.removeprefix("UTF-8''")) == label


def test_a_finished_topic_is_compacted_alone_never_with_the_new_topics_turns():
    # Rounds of user + assistant; the new topic starts at the user message at position 6.
    roles = ["user", "assistant"] * 5
    tokens = [10] * 10
    policy = CompactionPolicy(min_rounds=50, min_tokens=10_000, recent_window_turns=1,
                              topic_shift_min_rounds=2)
    whole = plan_compaction(roles, tokens, (), policy, topic_shift=True)
    assert (whole.first, whole.last) == (0, 7)  # before the recent window
    finished = plan_compaction(roles, tokens, (), policy, topic_shift=True, topic_start=6)
    assert (finished.first, finished.last, finished.rounds, finished.reason) == (
        0, 5, 3, "topic_shift")
    # A finished topic too short to summarise early waits.
    assert plan_compaction(roles, tokens, (), policy, topic_shift=True, topic_start=2) is None
