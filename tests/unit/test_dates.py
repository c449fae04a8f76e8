"""Dates written in conversation text, and the date each message is anchored to."""

import datetime

import pytest

from gateway.core.text.dates import (after_opening_date, anchor_dates, find_dates, opening_date,
                                      with_anchor)

D = datetime.date


@pytest.mark.parametrize("text, written, date", [
    ("[1:56 pm on 8 May, 2023] Caroline: hi", "1:56 pm on 8 May, 2023", D(2023, 5, 8)),
    ("we met on 8 May 2023.", "8 May 2023", D(2023, 5, 8)),
    ("due May 8, 2023!", "May 8, 2023", D(2023, 5, 8)),
    ("due May 8th 2023", "May 8th 2023", D(2023, 5, 8)),
    ("the 3rd of March, 2024", "3rd of March, 2024", D(2024, 3, 3)),
    ("Sept 30, 2022 it was", "Sept 30, 2022", D(2022, 9, 30)),
    ("9:00 am on 3 March, 2024", "9:00 am on 3 March, 2024", D(2024, 3, 3)),
    ("log 2023-05-08 ok", "2023-05-08", D(2023, 5, 8)),
    ("log 2023/5/8 ok", "2023/5/8", D(2023, 5, 8)),
    ("at 2023-05-08T14:30 sharp", "2023-05-08T14:30", D(2023, 5, 8)),
    ("我们2023年5月8日见面", "2023年5月8日", D(2023, 5, 8)),
    ("[2024年3月2日 上午10:00] 小明：你好", "2024年3月2日 上午10:00", D(2024, 3, 2)),
    ("2024年12月31号晚上8点半", "2024年12月31号晚上8点半", D(2024, 12, 31)),
])
def test_finds_a_complete_date_as_written(text, written, date):
    [mention] = find_dates(text)
    assert (mention.written, mention.date) == (written, date)
    assert text[mention.start:mention.end].strip() == written


@pytest.mark.parametrize("text", [
    "yesterday I went out", "see you next week", "on 8 May we talked", "in May 2023",
    "31 April, 2023", "2023-02-30", "2023年2月30日", "call 2023-05-08-1234 now",
    "version 1.2.3", "I have 8 cats",
])
def test_relative_partial_or_impossible_dates_are_not_dates(text):
    assert find_dates(text) == []


def test_several_dates_in_order_without_overlap():
    found = find_dates("From 1 June 2023 to 2023-06-30, then 2023年7月1日.")
    assert [m.written for m in found] == ["1 June 2023", "2023-06-30", "2023年7月1日"]


def test_anchor_is_the_last_date_written_at_or_before_each_message():
    texts = ["hello", "[1:56 pm on 8 May, 2023] Caroline: hi", "Mel: hey",
             "yesterday was fun", "[10 June, 2023] Caroline: back", "ok"]
    assert anchor_dates(texts) == [None, "1:56 pm on 8 May, 2023", "1:56 pm on 8 May, 2023",
                                   "1:56 pm on 8 May, 2023", "10 June, 2023", "10 June, 2023"]


def test_anchor_carried_in_from_earlier_messages():
    assert anchor_dates(["a", "2023-01-02 b"], initial="8 May 2023") == \
        ["8 May 2023", "2023-01-02"]


@pytest.mark.parametrize("text, opening", [
    ("[2023/05/20 (Sat) 06:03] I love the playlist.", "2023/05/20"),
    (" [10 June, 2023] Caroline: back", "10 June, 2023"),
    ("1:56 pm on 8 May, 2023: hello", "1:56 pm on 8 May, 2023"),
    ("2024年3月2日 上午10:00 你好", "2024年3月2日 上午10:00"),
    ("I was born on December 20, 1983.", None),  # what the message is about
    ("Sure! The treaty was signed on 8 May 1945 in Berlin.", None),
    ("[Mon] 8 May 2023 went well", None),
    ("", None),
])
def test_only_a_date_a_message_opens_with_is_a_session_marker(text, opening):
    assert opening_date(text) == opening


def test_a_date_written_inside_a_message_does_not_move_the_anchor():
    texts = ["[2023/05/20 (Sat) 06:03] Tell me about my grandfather.",
             "He was born on December 20, 1983, you said.", "Thanks!"]
    assert anchor_dates(texts) == ["2023/05/20", "2023/05/20", "2023/05/20"]


@pytest.mark.parametrize("text, anchor, shown", [
    ("Mel: hey", "8 May, 2023", "[8 May, 2023] Mel: hey"),
    ("[8 May, 2023] Mel: hey", "8 May, 2023", "[8 May, 2023] Mel: hey"),
    ("Mel: hey", None, "Mel: hey"),
])
def test_with_anchor_prefixes_only_when_missing(text, anchor, shown):
    assert with_anchor(text, anchor) == shown


@pytest.mark.parametrize("text, rest", [
    ("[8 May, 2023] Mel: hey", "Mel: hey"),
    ("  [2023/05/30 (Tue) 10:49] How many?", "How many?"),
    ("1:56 pm on 8 May, 2023: Caroline: hi", "Caroline: hi"),
    ("2024年3月2日 我们聊了什么", "我们聊了什么"),
    ("On 8 May, 2023 we met", "On 8 May, 2023 we met"),
    ("no date here", "no date here"),
    ("[8 May, 2023", ""),
])
def test_after_opening_date_is_the_text_without_its_session_marker(text, rest):
    assert after_opening_date(text) == rest
    assert (after_opening_date(text) == text) == (opening_date(text) is None)
