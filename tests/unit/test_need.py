"""Whether a message needs memory at all (gateway/core/recall/need.py)."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.recall.need import Need, asked, memory_need, search_text

PLEASANTRIES = [
    "Thanks!", "Thank you so much!", "thanks a lot :)", "Bye!", "See you tomorrow!",
    "Good morning! How are you today?", "Hey Sam! Good to see you! How have you been?",
    "Ok, sounds good.", "You’re welcome!", "Take care, see ya", "Thanks, that's all for now!",
    "Have a nice day!", "lol", "Thanks, Bob!",
    "谢谢！", "谢谢啦", "早上好！你今天怎么样？", "好的，明天见！", "暂时就这些，谢谢！", "晚安",
]
QUESTIONS = [
    "Thanks! What should I cook tonight?", "Good morning! Any news about the trip?",
    "Thanks Bob and Alice", "Hey Dana! I just got back from a trip!", "Yes, do that",
    "What is 17 times 23?", "How long should I boil an egg?", "好看吗？", "鸡蛋应该煮多久？",
    "谢谢！那家餐厅叫什么？",
]
ABOUT_THE_PAST = [
    "Do you remember what my cat is called?", "What did we talk about on March 3rd?",
    "What did we talk about in our first conversation?", "As I said, the meeting moved.",
    "Last time you suggested a book. Which one was it?", "What methods have you told me about?",
    "Did I mention where I work?", "你还记得我的猫叫什么吗？", "3月5号我们聊了什么？",
    "上次你推荐的书是哪本？", "Thanks! Do you remember the name of that café?",
]


@pytest.mark.parametrize("message", PLEASANTRIES)
def test_pleasantries_need_no_memory(message):
    assert memory_need(message) is Need.NONE


@pytest.mark.parametrize("message", QUESTIONS)
def test_anything_more_than_pleasantries_is_open(message):
    assert memory_need(message) is Need.OPEN


@pytest.mark.parametrize("message", ABOUT_THE_PAST)
def test_a_message_about_what_was_said_before_is_past_even_with_a_pleasantry(message):
    assert memory_need(message) is Need.PAST


NAMING_A_DAY = [
    "On April 27th, how long did I run?", "What did I cook on 5 May?", "Where was I on 2023-05-04?",
    "What happened yesterday at the office?", "Where did I go last weekend?",
    "4月27号我跑了多久？", "我昨天吃了什么？", "上周六我去了哪里？", "五月四日我们去了哪？",
]


@pytest.mark.parametrize("message", NAMING_A_DAY)
def test_a_message_naming_a_day_before_asks_about_the_past(message):
    assert memory_need(message) is Need.PAST


@pytest.mark.parametrize("message", ["What is 17 times 23?", "May I ask you something?",
                                     "Is 3.5 bigger than 3.25?", "17乘以23等于多少？"])
def test_numbers_that_are_no_day_do_not_make_a_message_past(message):
    assert memory_need(message) is Need.OPEN


@pytest.mark.parametrize("message", ["", "   ", "???", "🙂"])
def test_a_message_without_words_is_open(message):
    assert memory_need(message) is Need.OPEN


def test_words_are_whole_and_case_does_not_matter():
    assert memory_need("THANKS!") is Need.NONE
    assert memory_need("Okapi") is Need.OPEN  # "ok" inside a word is no formula
    assert memory_need("hiking?") is Need.OPEN
    assert memory_need("I REMEMBER it") is Need.PAST


@given(st.sampled_from(PLEASANTRIES), st.sampled_from(["pancakes", "the museum", "tuesday",
                                                        "我的猫", "博物馆", "your plan"]))
def test_a_pleasantry_with_one_more_thing_said_is_not_none(pleasantry, more):
    assert memory_need(f"{pleasantry} {more}?") is not Need.NONE


def test_a_long_message_is_read_only_at_its_end_for_the_past_and_is_never_pleasantries():
    filler = "We went to the market and bought apples and pears for the pie. " * 100
    assert memory_need(filler + "Do you remember the recipe?") is Need.PAST
    assert memory_need("Do you remember the recipe? " + filler) is Need.OPEN  # past the end read
    assert memory_need("Thanks! " * 40) is Need.OPEN


@pytest.mark.parametrize("marker", ["[8 May, 2023] ", "1:56 pm on 8 May, 2023: ",
                                    "[2023/05/30 (Tue) 10:49] ", "2024年3月2日 "])
@pytest.mark.parametrize("message", PLEASANTRIES[:3] + QUESTIONS[:3] + ABOUT_THE_PAST[:3])
def test_a_session_marker_the_message_opens_with_is_not_a_day_it_asks_about(marker, message):
    assert memory_need(marker + message) is memory_need(message)


@pytest.mark.parametrize("message, searched", [
    # A marker set off in brackets or with a time of day is when the client asks: left out.
    ("[2023/05/30 (Tue) 19:58] Can you recommend a book?", "Can you recommend a book?"),
    ("[8 May, 2023] Where did I go on 5 May, 2023?", "Where did I go on 5 May, 2023?"),
    ("1:56 pm on 8 May, 2023: What did I eat?", "What did I eat?"),
    ("2024年3月2日 上午10:00 我们聊了什么", "我们聊了什么"),
    # A bare date the message opens with may be what it asks about: kept.
    ("2024年3月2日我去了哪里？", "2024年3月2日我去了哪里？"),
    ("8 May, 2023 was a great day, what did we do?",
     "8 May, 2023 was a great day, what did we do?"),
    ("Where did I go on 5 May, 2023?", "Where did I go on 5 May, 2023?"),
])
def test_recall_searches_a_message_without_the_session_marker_it_opens_with(message, searched):
    assert search_text(message) == searched


def test_the_day_a_message_is_asked_on_is_its_session_marker_s_date():
    assert asked("[2023/05/30 (Tue) 19:58] What did I buy yesterday?")[0] == \
        datetime.date(2023, 5, 30)
    assert asked("1:56 pm on 8 May, 2023: What did I eat?")[0] == datetime.date(2023, 5, 8)
    assert asked("2024年3月2日我去了哪里？")[0] is None  # a bare date: what it asks about
    assert asked("What did I buy yesterday?")[0] is None


def test_a_day_named_anywhere_else_is_still_asked_about():
    assert memory_need("On 8 May, 2023, where did I go?") is Need.PAST
    assert memory_need("[8 May, 2023] Where did I go on 5 May, 2023?") is Need.PAST
