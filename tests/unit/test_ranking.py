"""The learned re-ranking of recall's candidates (gateway/core/recall/ranking.py): its features,
that
only turns move, that scores stay with places, and its weights' validation."""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.recall.ranker_weights import DEV_WEIGHTS
from gateway.core.recall.ranking import (FEATURES, Candidate, Ranker, feature_rows, gather,
                                  speaker_named, whose_words)
from gateway.core.recall.recollection import Recollection


def only(feature: str, weight: float = 1.0) -> Ranker:
    return Ranker.of({f: weight if f == feature else 0.0 for f in FEATURES})


def turn(i: str, text: str = "text", *, position: int = 0, fused: float = 0.0,
         **signals) -> Candidate:
    return Candidate(i, text, position, fused, **signals)


def test_features_of_candidates_are_relative_to_the_question():
    a = turn("a", "Ann: What did you do?", position=10, fused=0.09, similarity=0.5,
             dense_rank=1, following="b")
    b = turn("b", "Bo: I went hiking with my dog near the lake.", position=11, fused=0.05,
             similarity=0.3, dense_rank=3, lexical=1.0, lexical_rank=1, previous="a")
    c = turn("c", "Bo: ok", position=20, fused=0.04, lexical=0.5, lexical_rank=2,
             previous="not a candidate")
    rows = dict(zip("abc", (dict(zip(FEATURES, r))
                            for r in feature_rows("What did Bo do?", [a, b, c]))))
    assert rows["a"]["similarity"] == 0.5 and rows["a"]["similarity_gap"] == 0.0
    # Not a dense hit: the lowest dense hit's similarity stands in.
    assert rows["c"]["similarity"] == 0.3 and rows["c"]["similarity_gap"] == pytest.approx(-0.2)
    assert rows["a"]["dense_rank"] == 20 / 21 and rows["c"]["dense_rank"] == 0.0
    assert rows["b"]["lexical"] == 1.0 and rows["b"]["lexical_rank"] == 20 / 21
    assert rows["a"]["next_similarity"] == 0.3 and rows["a"]["next_lexical"] == 1.0
    assert rows["b"]["previous_similarity"] == 0.5
    assert (rows["a"]["asks"], rows["b"]["asks"]) == (1.0, 0.0)
    # Whether the turn before asks is known when that turn is a candidate too.
    assert (rows["a"]["answers"], rows["b"]["answers"], rows["c"]["answers"]) == (0, 1, 0)
    assert rows["c"]["previous_similarity"] == 0.3  # unknown: the lowest dense hit's
    assert (rows["a"]["speaker_named"], rows["b"]["speaker_named"]) == (0.0, 1.0)
    assert (rows["a"]["place"], rows["b"]["place"], rows["c"]["place"]) == (0.0, 0.1, 1.0)
    assert rows["a"]["fused"] == 0.09


@pytest.mark.parametrize("text, query, named", [
    ("Ann: hello", "What does Ann like?", True),
    ("Ann: hello", "What does Anna like?", False),  # whole words in Latin script
    ("[2 May 2023] Ann: hello", "Where is Ann?", True),  # after a date anchor
    ("hello Ann: hi", "Where is Ann?", False),  # a label starts a line
    ("王磊：我喜欢爵士乐", "王磊喜欢什么音乐？", True),  # Chinese names border other characters
    ("李娜：你好", "王磊喜欢什么音乐？", False),
])
def test_speaker_named(text, query, named):
    assert speaker_named(text, query) is named


def test_each_feature_orders_turns_by_its_own_value():
    question = turn("q", "Ann: Where did you go?", position=1, fused=0.9, similarity=0.9,
                    following="answer")
    answer = turn("answer", "Bo: To the coast, for a week of sailing and long walks.",
                  position=2, fused=0.5, similarity=0.2, previous="q")
    assert [i for i, _ in only("fused").rank("Where did Bo go?", [question, answer])] == \
        ["q", "answer"]
    for feature in ("answers", "speaker_named", "place", "previous_similarity"):
        ranked = only(feature).rank("Where did Bo go?", [question, answer])
        assert [i for i, _ in ranked] == ["answer", "q"], feature
    assert [i for i, _ in only("asks", -1.0).rank("Where did Bo go?", [question, answer])] \
        == ["answer", "q"]


def test_only_turns_move_and_each_place_keeps_its_score():
    chunk = Candidate("chunk:1", "Summary: a long summary " * 20, 0, 0.8, similarity=0.9,
                      is_turn=False)
    short = turn("t1", "ok", position=5, fused=0.9)
    long = turn("t2", "a much longer turn that says a lot more", position=6, fused=0.7)
    ranked = only("place").rank("q", [short, chunk, long])
    assert ranked == [("t2", 0.9), ("chunk:1", 0.8), ("t1", 0.7)]


def test_ties_keep_the_given_order():
    items = [turn(str(i), "same", fused=1.0 - i / 10) for i in range(5)]
    assert [i for i, _ in only("asks").rank("q", items)] == ["0", "1", "2", "3", "4"]


@given(st.lists(st.tuples(st.booleans(), st.text(max_size=30),
                          st.floats(0, 1), st.one_of(st.none(), st.floats(-1, 1))),
                max_size=12))
def test_a_ranking_is_a_permutation_that_keeps_non_turns_in_place(rows):
    items = [Candidate(f"i{n}", text, n, fused, similarity=sim, is_turn=is_turn)
             for n, (is_turn, text, fused, sim) in enumerate(rows)]
    ranked = Ranker.of(DEV_WEIGHTS).rank("What did Ann say?", items)
    assert sorted(i for i, _ in ranked) == sorted(c.id for c in items)
    assert [score for _, score in ranked] == [c.fused for c in items]
    for place, c in enumerate(items):
        if not c.is_turn:
            assert ranked[place][0] == c.id


def test_gathered_candidates_carry_each_search_s_signals_per_namespace():
    @dataclass
    class Link:
        previous: str | None
        following: str | None

    items = {i: Recollection(kind, i, f"text {i}", (), n, 0.0)
             for n, (i, kind) in enumerate([("a", "turn"), ("b", "turn"), ("u/c", "turn"),
                                            ("chunk:1", "chunk")])}
    fused = [("b", 0.9), ("gone", 0.8), ("a", 0.7), ("u/c", 0.6), ("chunk:1", 0.5)]
    found = gather(fused, items, {"a": Link(None, "b"), "b": Link("a", None)},
                   {"a": 0.4, "b": 0.5}, ["b", "a"],
                   [[("a", 4.0), ("b", 2.0)], [("u/c", 10.0)]])
    # In fused order; an id without an item (gone since the index was built) left out.
    assert [c.id for c in found] == ["b", "a", "u/c", "chunk:1"]
    b, a, c, chunk = found
    assert (b.fused, b.similarity, b.dense_rank, b.previous, b.following) == \
        (0.9, 0.5, 1, "a", None)
    # BM25 scores are divided by the best of their own namespace's ranking.
    assert (a.lexical, a.lexical_rank, b.lexical, c.lexical, c.lexical_rank) == \
        (1.0, 1, 0.5, 1.0, 1)
    assert (c.similarity, c.dense_rank, c.previous) == (None, None, None)
    assert (a.is_turn, chunk.is_turn) == (True, False)


def test_weights_must_name_every_feature_and_nothing_else():
    Ranker.of(DEV_WEIGHTS)
    with pytest.raises(ValueError, match="unknown \\['loudness'\\]"):
        Ranker.of({**DEV_WEIGHTS, "loudness": 1.0})
    with pytest.raises(ValueError, match="missing \\['place'\\]"):
        Ranker.of({k: v for k, v in DEV_WEIGHTS.items() if k != "place"})
    with pytest.raises(ValueError, match="finite"):
        Ranker.of({**DEV_WEIGHTS, "place": math.nan})
    with pytest.raises(ValueError, match=f"needs {len(FEATURES)} weights"):
        Ranker((1.0,))


@pytest.mark.parametrize("query, wanted", [
    ("在5月2号我们聊了什么？", {"b"}),
    ("What did I say on May 2nd?", {"b"}),
    ("昨天我说了什么？", {"c"}),  # relative: from the latest candidate's day (e's)
    ("What did I say yesterday?", {"c"}),
    ("What did I say about hiking?", set()),  # names no day: 0 for every candidate
])
def test_named_day_marks_the_candidates_said_on_a_day_the_question_names(query, wanted):
    found = [turn("a", "[2023-04-27] User: I went hiking."),
             turn("b", "[2023-05-02] User: I went to a museum."),
             turn("c", "[2023-05-05] Assistant: Happy birthday!"),
             turn("d", "User: no anchor"),
             turn("e", "[2023-05-06] User: Good morning.")]
    rows = feature_rows(query, found)
    marked = {c.id for c, r in zip(found, rows) if r[FEATURES.index("named_day")] == 1.0}
    assert marked == wanted
    assert only("named_day").rank(query, found)[0][0] == (min(wanted) if wanted else "a")


def test_relative_days_count_from_the_day_the_question_is_asked_when_it_says_so():
    found = [turn("b", "[2023-05-02] User: I went to a museum."),
             turn("e", "[2023-05-06] User: Good morning.")]
    # Asked on May 3rd (its session marker): yesterday is May 2nd, not the day before the
    # latest turn.
    rows = feature_rows("What did I say yesterday?", found, datetime.date(2023, 5, 3))
    assert [r[FEATURES.index("named_day")] for r in rows] == [1.0, 0.0]
    assert only("named_day").rank("What did I say yesterday?", found,
                                  datetime.date(2023, 5, 3))[0][0] == "b"


def test_weights_set_before_a_feature_was_added_rank_as_they_did():
    before = {k: v for k, v in DEV_WEIGHTS.items() if k not in ("named_day", "own_words")}
    assert Ranker.of(before).to_dict() == {**before, "named_day": 0.0, "own_words": 0.0}


@pytest.mark.parametrize("query, marked", [
    ("What colour is my boat?", {"u"}),
    ("What did I say about the boat?", {"u"}),
    ("我的船是什么颜色？", {"u"}),
    ("What colour is Ada's boat?", set()),  # not about the user's own words
    ("她的船是什么颜色？", set()),
    ("What colour did you say my boat was?", {"a"}),  # what the assistant said
    ("你告诉过我船是什么颜色？", {"a"}),
])
def test_own_words_marks_the_turns_of_the_one_whose_words_the_question_asks_about(query,
                                                                                   marked):
    found = [turn("a", "The boat? Blue, as you said.", role="assistant"),
             turn("u", "My boat is blue.", role="user"),
             turn("x", "A boat of unknown speaker.")]
    rows = feature_rows(query, found)
    assert {c.id for c, r in zip(found, rows) if r[FEATURES.index("own_words")] == 1.0} == marked
    assert only("own_words").rank(query, found)[0][0] == (min(marked) if marked else "a")


def test_own_words_reads_the_end_of_a_long_message_only():
    found = [turn("a", "Sure.", role="assistant"), turn("u", "My boat is blue.", role="user")]
    filler = " We sailed past the harbour and along the coast." * 20
    assert only("own_words").rank("What colour is my boat?" + filler + " Which colour?",
                                  found)[0][0] == "a"  # the first person is too far back
    assert only("own_words").rank(filler + " What colour is my boat?", found)[0][0] == "u"


def test_a_stored_turns_speaker_labels_are_read_once_and_carried_with_it():
    said = Recollection("turn", "t1", "[2023-05-02] Ann: hi\nBo: and then?", ("t1",), 1, 0.0)
    assert said.speakers == ("Ann", "Bo")
    moved = said.changed(position=7, score=0.5, relevance=0.3)
    assert moved.speakers is said.speakers and moved.day == said.day
    assert Recollection("fact", "f1", "Ann: likes jazz", (), -1, 0.0).speakers == ()
    (candidate,) = gather([("t1", 0.5)], {"t1": said}, {}, {}, [], [])
    assert candidate.speakers is said.speakers


def test_a_candidate_without_its_labels_ranks_as_one_given_them():
    text = "Bo: I went hiking with my dog near the lake."
    bare = turn("b", text, position=1, fused=0.1)
    given = bare._replace(speakers=("Bo",))
    assert feature_rows("Where did Bo go?", [bare]) == feature_rows("Where did Bo go?", [given])
    assert feature_rows("Where did Bo go?", [bare])[0][FEATURES.index("speaker_named")] == 1.0

@pytest.mark.parametrize("question, whose", [
    ("What did you recommend to me?", "assistant"),
    ("You once recommended a game to me. What was its name?", "assistant"),
    ("What advice have you given me about sleep?", "assistant"),
    ("你曾经和我推荐了很多书籍，你还记得有哪些吗？", "assistant"),
    ("Could you remind me of the restaurant in the old town?", "assistant"),
    ("Could you remind me where I parked?", "user"),  # reminded of the user's own words
    ("Can you recommend a book for me?", "user"),  # a request, not past words
    ("I told you about my trip last week; where did I go?", "user"),
    ("我曾经和你提到我去过绿禾公园，我看到了什么？", "user"),  # 你 is the object
    ("What colour is Ada's boat?", None),
    ("When did Melanie paint a sunrise?", None),
])
def test_whose_words_a_question_asks_about(question, whose):
    assert whose_words(question) == whose
