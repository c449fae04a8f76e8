"""The days a question names and the day a stored turn belongs to, as one lexical search key
(gateway/core/text/days.py), and the lexical index finding a named day's turns by them."""

import datetime

import pytest

from gateway.core.text.days import day_key, day_of, named_days
from gateway.memory.search.bm25 import Bm25
from gateway.memory.search.lexical_index import document_terms, query_terms
from gateway.memory.search.segmentation import words

D = datetime.date
SATURDAY = D(2023, 5, 6)


@pytest.mark.parametrize("question, keys", [
    ("我曾经在5月2日提到过我去了博物馆，你还记得我当时看了什么展览吗？", ["@05-02"]),
    ("在4月27号这天，我在公园里跑了多久？", ["@04-27"]),
    ("我五月二号和十二月三十一日都做了什么？", ["@05-02", "@12-31"]),
    ("On April 27th, how long did I run in the park?", ["@04-27"]),
    ("I mentioned on May 2nd that I went to the museum.", ["@05-02"]),
    ("What did I say on the 3rd of March and on 14 Feb?", ["@03-03", "@02-14"]),
    ("我们2023年5月8日见面", ["@05-08"]),
    ("[1:56 pm on 8 May, 2023] when was it?", ["@05-08"]),
    ("2月29日是闰日", ["@02-29"]),
])
def test_a_question_names_its_day_without_a_year(question, keys):
    assert named_days(question) == keys
    assert named_days(question, SATURDAY) == keys


@pytest.mark.parametrize("question", [
    "I may 2 go there", "2月30日", "13月2日", "4月", "二十七号", "what happened in 2023?",
    "你记得我昨天说了什么吗？",  # relative: no day without today
])
def test_no_day_where_none_is_named(question):
    assert named_days(question) == []


@pytest.mark.parametrize("question, day", [
    ("你记得我昨天说了什么吗？", D(2023, 5, 5)),
    ("我前天去了哪里？", D(2023, 5, 4)),
    ("大前天我们聊了什么？", D(2023, 5, 3)),
    ("今天我跑了多久？", D(2023, 5, 6)),
    ("我上周六去了哪里？", D(2023, 4, 29)),
    ("上个星期一你推荐了什么书？", D(2023, 4, 24)),
    ("这周三我说了什么？", D(2023, 5, 3)),
    ("上上周日呢？", D(2023, 4, 23)),
    ("What did I tell you yesterday?", D(2023, 5, 5)),
    ("What did we do the day before yesterday?", D(2023, 5, 4)),
    ("Where did I go last Saturday?", D(2023, 4, 29)),
    ("Where did I go last Thursday?", D(2023, 5, 4)),
])
def test_relative_days_resolve_from_today(question, day):
    assert named_days(question, SATURDAY) == [day_key(day.month, day.day)]


@pytest.mark.parametrize("text, day", [
    ("[2023-04-27] User: 我今天在公园跑了一个小时。", D(2023, 4, 27)),
    ("[1:56 pm on 8 May, 2023] Caroline: Hey Mel!", D(2023, 5, 8)),
    ("[2024年3月2日 上午10:00] 小明：你好", D(2024, 3, 2)),
    ("we met on 8 May 2023 and again on 9 May 2023", D(2023, 5, 9)),
    ("[note] nothing dated here", None),
])
def test_a_turn_belongs_to_its_anchor_day(text, day):
    assert day_of(text) == day


def test_a_named_day_finds_the_turns_said_on_it():
    """Turns of three days (as the turn index stores them, date-anchored); the question names
    the day but shares no other word with the answer."""
    turns = ["[2023-04-30] User: 最近工作压力有些大，有时候会感到焦虑。",
             "[2023-05-02] User: 今天去了博物馆，看了古代艺术品展览。",
             "[2023-05-02] Assistant: 听起来很有收获！",
             "[2023-05-04] User: 我在准备一场重要的演讲。"]
    index, latest = Bm25(), None
    for turn in turns:
        terms, day = document_terms(turn, segment=words)
        index.add(terms)
        latest = day if latest is None or day > latest else latest
    assert latest == D(2023, 5, 4)

    def best(question: str) -> int:
        scores = index.scores(query_terms(question, latest, segment=words))
        return int(scores.argmax()) if scores.max() > 0 else -1

    said_on_may_2 = (1, 2)
    assert best("5月2日那天我做了什么？") in said_on_may_2
    assert best("What did I do on May 2nd?") in said_on_may_2
    assert best("我前天说了什么？") in said_on_may_2  # 2023-05-04 minus two days
    assert best("我昨天说了什么？") == -1  # 2023-05-03: nothing was said


def test_anchor_day_reads_each_anchor_once():
    from gateway.core.text.days import anchor_day
    known: dict = {}
    assert anchor_day("[2023-05-02] User: hi", known) == datetime.date(2023, 5, 2)
    assert anchor_day("[2023-05-02] Assistant: hello", known) == datetime.date(2023, 5, 2)
    assert list(known) == ["2023-05-02"]
    assert anchor_day("User: on 2023-05-03 I left", known) is None  # no anchor: not read
    assert anchor_day("[not a date] x", known) is None
