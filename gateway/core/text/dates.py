"""Calendar dates written in conversation text, and the date each message belongs to.

Recalled turns are shown with the date they were said on (`[8 May, 2023] Caroline: ...`), so a
temporal question ("when did she go to the support group?") keeps its answer. The date comes
from the text itself: session markers such as "1:56 pm on 8 May, 2023" or "2024年3月2日 上午10:00"
that apps and transcripts put before a session, carried forward to every later message. Only a
date a message opens with is such a marker ("[8 May, 2023] Caroline: ...", "2024年3月2日 你好");
a date written further on ("I was born on December 20, 1983") is what the message is about,
not when it was said.

Invariants:
- only complete calendar dates count (day, month and year, and a real day of that month):
  relative words ("yesterday", "next week") and partial dates ("8 May") are not dates, because
  an anchor must be right without knowing "today";
- a mention keeps the text exactly as written (with an adjacent time of day when there is
  one), so the anchor reads as the source wrote it and can be found verbatim in it;
- pure: no clock, no locale; the same texts always give the same anchors.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from typing import Sequence

_MONTHS = {
    "january": 1, "jan": 1, "february": 2, "feb": 2, "march": 3, "mar": 3, "april": 4,
    "apr": 4, "may": 5, "june": 6, "jun": 6, "july": 7, "jul": 7, "august": 8, "aug": 8,
    "september": 9, "sept": 9, "sep": 9, "october": 10, "oct": 10, "november": 11, "nov": 11,
    "december": 12, "dec": 12,
}
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:1[89]|2\d)\d\d)"
# "1:56 pm on ", "10:00 ", "3pm, " before an English date: kept as part of the mention.
_EN_TIME = r"(?:(?:[01]?\d|2[0-3])(?::[0-5]\d)?\s*(?:[ap]\.?m\.?)(?:\s+on)?,?\s+|" \
           r"(?:[01]?\d|2[0-3]):[0-5]\d(?:\s+on)?,?\s+)?"
_EN_DAY_MONTH = rf"{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}"
_EN_MONTH_DAY = rf"{_MONTH}\s+{_DAY},?\s+{_YEAR}"
# Chinese: 2023年5月8日 / 2023年05月08号, optionally followed by a time of day.
_ZH_TIME = r"(?:\s*(?:上午|下午|晚上|早上|中午|凌晨|傍晚)?\s*\d{1,2}(?:[:：]\d{2}|点(?:\d{1,2}分|半)?))?"
_ZH = rf"{_YEAR}\s*年\s*(?P<zmonth>1[0-2]|0?[1-9])\s*月\s*(?P<zday>[0-3]?\d)\s*[日号]{_ZH_TIME}"
_ISO = rf"{_YEAR}[-/](?P<imonth>1[0-2]|0?[1-9])[-/](?P<iday>[0-3]?\d)" \
       r"(?:[T ](?:[01]\d|2[0-3]):[0-5]\d(?::[0-5]\d)?)?"

_PATTERNS = (
    ("en", re.compile(rf"(?<![\w:])(?:{_EN_TIME}){_EN_DAY_MONTH}(?!\d)", re.IGNORECASE)),
    ("en", re.compile(rf"(?<![\w:])(?:{_EN_TIME}){_EN_MONTH_DAY}(?!\d)", re.IGNORECASE)),
    ("zh", re.compile(rf"(?<!\d){_ZH}")),
    ("iso", re.compile(rf"(?<![\d/-]){_ISO}(?![\d/-])")),
)


# What may stand before a session marker's date, and how far the marker reaches.
_OPENING = re.compile(r"\s*\[?\s*")
_MARKER_CHARS = 80


@dataclass(frozen=True, slots=True)
class DateMention:
    """One date written in a text: `text[start:end] == written`."""

    start: int
    end: int
    written: str
    date: datetime.date


def find_dates(text: str) -> list[DateMention]:
    """Every complete calendar date in `text`, in order of appearance, without overlaps
    (where two forms overlap, the earlier-starting, then longer one wins)."""
    found: list[DateMention] = []
    for kind, pattern in _PATTERNS:
        for match in pattern.finditer(text):
            day = _to_date(kind, match)
            if day is not None:
                found.append(DateMention(match.start(), match.end(), match.group(0).strip(), day))
    found.sort(key=lambda m: (m.start, -(m.end - m.start)))
    kept: list[DateMention] = []
    for mention in found:
        if not kept or mention.start >= kept[-1].end:
            kept.append(mention)
    return kept


def _to_date(kind: str, match: re.Match[str]) -> datetime.date | None:
    try:
        year = int(match.group("year"))
        if kind == "en":
            month, day = _MONTHS[match.group("month").lower()], int(match.group("day"))
        elif kind == "zh":
            month, day = int(match.group("zmonth")), int(match.group("zday"))
        else:
            month, day = int(match.group("imonth")), int(match.group("iday"))
        return datetime.date(year, month, day)
    except ValueError:  # 31 April, 2023-02-30: looks like a date, is not one
        return None


def anchor_dates(texts: Sequence[str], initial: str | None = None) -> list[str | None]:
    """For each message of a conversation (oldest first), the date it belongs to: the last
    date a message at or before it opens with (`opening_date`), as written; `initial` (the
    anchor carried in from earlier messages, None at the start) until a message opens with a
    date. `len(result) == len(texts)`."""
    return carried([opening_date(text) for text in texts], initial)


def opening_date(text: str) -> str | None:
    """The complete date `text` opens with (after blanks, inside a leading `[` or not), as
    written; None if it opens with none."""
    found = _opening(text)
    return found[1].written if found else None


def after_opening_date(text: str) -> str:
    """`text` without the session marker it opens with (`opening_date`: the date, what follows
    it up to a closing `]` of a bracketed marker, and the separators after it); `text` itself
    when it opens with none."""
    found = _opening(text)
    if found is None:
        return text
    start, mention = found
    end = start + mention.end
    if "[" in text[:start]:
        close = text.find("]", end, start + _MARKER_CHARS)
        end = close + 1 if close >= 0 else end
    return text[end:].lstrip(" \t:,-–—")


def _opening(text: str) -> tuple[int, DateMention] | None:
    """(where its date starts, the date) of the marker `text` opens with."""
    head = _OPENING.match(text)
    start = head.end() if head else 0
    mentions = find_dates(text[start:start + _MARKER_CHARS])
    return (start, mentions[0]) if mentions and mentions[0].start == 0 else None


def carried(written: Sequence[str | None], initial: str | None = None) -> list[str | None]:
    """`anchor_dates` from each message's `opening_date` (a caller that keeps those per
    message need not search its texts again)."""
    anchors: list[str | None] = []
    current = initial
    for found in written:
        if found is not None:
            current = found
        anchors.append(current)
    return anchors


def with_anchor(text: str, anchor: str | None) -> str:
    """`text` prefixed with `[anchor] `, unless it has no anchor or already contains it."""
    if anchor is None or anchor in text:
        return text
    return f"[{anchor}] {text}"
