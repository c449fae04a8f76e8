"""The days a question names, and the day a recalled turn was said on, as one search key.

Recall shows every turn with the date it belongs to (gateway/core/text/dates.py: `[2023-05-02]
...`), but a question names its day the way people do: "5月2日", "4月27号", "上周六", "昨天",
"On May 2nd", "last Saturday" — no year, or no date at all. For lexical search both sides become
the same key, `day_key`: month and day (a question rarely names the year, and the year is a
token of the anchor anyway). A turn's key comes from its anchor (`day_of`); a question's from
what it names (`named_days`): complete dates, month and day without a year (Chinese, also in
Chinese numerals, and English), and — given `today`, the date the conversation is at —
relative days (今天/昨天/前天/大前天, 上周X/这周X, today/yesterday, last <weekday>).

Invariants: pure (no clock: "today" is passed in, and relative days are not resolved without
it); a key is never a token of ordinary text (it contains "@", which word tokens never do).
"""

from __future__ import annotations

import datetime
import enum
import re
from typing import Final

from gateway.core.text.dates import find_dates

_ZH_NUMBER = {"一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8,
              "九": 9, "十": 10}
_ZH_NUM = r"(?:\d{1,2}|[一二三四五六七八九十]{1,3})"
_ZH_MONTH_DAY = re.compile(rf"(?<![\d年])(?P<month>{_ZH_NUM})\s*月\s*(?P<day>{_ZH_NUM})\s*[日号號]")
_EN_MONTHS = {
    "january": 1, "february": 2, "march": 3, "april": 4, "may": 5, "june": 6, "july": 7,
    "august": 8, "september": 9, "october": 10, "november": 11, "december": 12,
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8, "sep": 9,
    "sept": 9, "oct": 10, "nov": 11, "dec": 12,
}
# "may" is also a verb: the month only when capitalised ("May 2nd"), every other name in any case.
_EN_MONTH = (r"(?P<month>May|(?i:" + "|".join(sorted((m for m in _EN_MONTHS if m != "may"),
                                                      key=len, reverse=True)) + r"))\.?")
_EN_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_EN_MONTH_DAY = re.compile(rf"\b{_EN_MONTH}\s+{_EN_DAY}(?![\d:])")
_EN_DAY_MONTH = re.compile(rf"(?<![\d:])\b{_EN_DAY}\s+(?:of\s+)?{_EN_MONTH}\b")

_ZH_RELATIVE = {"今天": 0, "今日": 0, "昨天": -1, "昨日": -1, "前天": -2, "大前天": -3}
_ZH_RELATIVE_RE = re.compile("大前天|前天|昨天|昨日|今天|今日")
_ZH_WEEKDAY = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
_ZH_WEEK_RE = re.compile(r"(?P<which>上上|上|这|本)(?:个)?(?:周|星期|礼拜)(?P<day>[一二三四五六日天])")
_EN_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_EN_RELATIVE_RE = re.compile(r"\b(?:(?P<before>the day before yesterday)|(?P<yesterday>yesterday)"
                             r"|(?P<today>today)|last (?P<weekday>" + "|".join(_EN_WEEKDAYS)
                             + r"))\b", re.IGNORECASE)
_ANCHOR = re.compile(r"\[([^\[\]\n]{1,60})\] ")
_DIGIT = re.compile(r"\d")
_DIGIT_OR_MONTH = re.compile(r"\d|月")
_RELATIVE_HINT = re.compile(r"[天日周期拜]|(?i:today|yesterday|last)")


class Unread(enum.Enum):
    UNREAD = "unread"


UNREAD: Final = Unread.UNREAD
"""A `day` not given to the object that holds it: derived from its text (`day_of`) when it is
made (gateway/core/recall/recollection.py, gateway/core/recall/ranking.py `Candidate`)."""


def day_key(month: int, day: int) -> str:
    """The search key of a day of the year (`@05-02`)."""
    return f"@{month:02d}-{day:02d}"


def day_of(text: str) -> datetime.date | None:
    """The day a stored turn's text belongs to: its leading `[anchor] ` when that is a date
    (gateway/core/text/dates.py `with_anchor`), else the last complete date the text writes."""
    match = _ANCHOR.match(text)
    if match is not None and (mentions := find_dates(match.group(1))):
        return mentions[-1].date
    if not _DIGIT.search(text):  # every complete date has digits: most turns have none
        return None
    mentions = find_dates(text)
    return mentions[-1].date if mentions else None


def anchor_day(text: str, known: dict[str, datetime.date | None]) -> datetime.date | None:
    """The day of `text`'s leading `[anchor] ` (None without one), each distinct anchor read
    once per `known` (a cache the caller keeps: the turns of one day share their anchor)."""
    match = _ANCHOR.match(text)
    if match is None:
        return None
    anchor = match.group(1)
    if anchor not in known:
        mentions = find_dates(anchor)
        known[anchor] = mentions[-1].date if mentions else None
    return known[anchor]


def mentions_day(text: str) -> bool:
    """Whether `text` could name a day (`named_days` may find one): it holds a digit, a
    Chinese month, or a relative word — a cheap test before reading any candidate's day."""
    return bool(_DIGIT_OR_MONTH.search(text) or _RELATIVE_HINT.search(text))


def named_days(text: str, today: datetime.date | None = None) -> list[str]:
    """The day keys of the days `text` names, in order of appearance, without repeats. Relative
    days only when `today` is given; a month and day that is no day of any year is left out."""
    found: list[tuple[int, str]] = []
    # Every question goes through here on the request path: the patterns only run on text
    # that could hold what they find (a digit or a Chinese numeral before 月; a relative word).
    if _DIGIT_OR_MONTH.search(text):
        for mention in find_dates(text):
            found.append((mention.start, day_key(mention.date.month, mention.date.day)))
        for pattern in (_ZH_MONTH_DAY, _EN_MONTH_DAY, _EN_DAY_MONTH):
            for match in pattern.finditer(text):
                key = _month_day(match.group("month"), match.group("day"))
                if key is not None:
                    found.append((match.start(), key))
    if today is not None and _RELATIVE_HINT.search(text):
        found.extend((start, day_key(d.month, d.day)) for start, d in _relative(text, today))
    return list(dict.fromkeys(key for _, key in sorted(found)))


def _month_day(month_text: str, day_text: str) -> str | None:
    month = _EN_MONTHS.get(month_text.lower()) or _number(month_text)
    day = _number(day_text)
    if month is None or day is None:
        return None
    try:
        datetime.date(2000, month, day)  # a leap year: 2月29日 is a day
    except ValueError:
        return None
    return day_key(month, day)


def _number(text: str) -> int | None:
    """1–31 written in digits or in Chinese numerals (五, 十二, 二十七, 三十一)."""
    if text.isdigit():
        return int(text)
    if "十" not in text:
        return _ZH_NUMBER.get(text) if len(text) == 1 else None
    tens, _, ones = text.partition("十")
    if "十" in ones or (tens and tens not in _ZH_NUMBER) or (ones and ones not in _ZH_NUMBER):
        return None
    return (_ZH_NUMBER[tens] if tens else 1) * 10 + (_ZH_NUMBER[ones] if ones else 0)


def _relative(text: str, today: datetime.date) -> list[tuple[int, datetime.date]]:
    out = [(m.start(), today + datetime.timedelta(days=_ZH_RELATIVE[m.group(0)]))
           for m in _ZH_RELATIVE_RE.finditer(text)]
    monday = today - datetime.timedelta(days=today.weekday())
    for m in _ZH_WEEK_RE.finditer(text):
        weeks = {"上上": -2, "上": -1, "这": 0, "本": 0}[m.group("which")]
        out.append((m.start(), monday + datetime.timedelta(weeks=weeks,
                                                           days=_ZH_WEEKDAY[m.group("day")])))
    for m in _EN_RELATIVE_RE.finditer(text):
        if m.group("weekday"):
            # "last Saturday": the latest Saturday before today.
            back = (today.weekday() - _EN_WEEKDAYS.index(m.group("weekday").lower())) % 7 or 7
            out.append((m.start(), today - datetime.timedelta(days=back)))
        else:
            back = 2 if m.group("before") else 1 if m.group("yesterday") else 0
            out.append((m.start(), today - datetime.timedelta(days=back)))
    return out
