"""Personal identifiers found in text, and text with them replaced by typed placeholders.

Memory layers (summaries, facts, profile) store and recall `redact(text)`, never the raw text;
the verbatim transcript keeps what the user sent.

Detected (ASCII or full-width digits, spaces or dashes between digit groups):
- `[EMAIL]`: e-mail addresses;
- `[ID_NUMBER]`: Chinese resident ID numbers (18 characters, the last may be X, with a valid
  birth date and checksum; the legacy 15-digit form with a valid birth date) and US social
  security numbers in their dashed form (AAA-GG-SSSS);
- `[BANK_CARD]`: card numbers starting 2–6 that pass the Luhn check: 15–19 digits in one run,
  or 13–19 digits grouped as printed on cards (4-4-4-4, 4-4-4-4-3, Amex 4-6-5);
- `[PHONE]`: Chinese mobile numbers (1[3-9]x, 11 digits, optional +86 / 0086), Chinese
  landlines with an area code (010-12345678), international numbers written with a leading `+`
  (8–15 digits) and North American grouped forms ((415) 555-2671, 415-555-2671).

Invariants (tests/test_pii.py, with hypothesis):
- `redact` is idempotent: `redact(redact(x)) == redact(x)` (it repeats until nothing is found);
- text with no digit and no `@` is returned unchanged; placeholders contain neither;
- dates, years, amounts (`2023-03-01`, `50,000`, `30万元`) and digit runs without a PII shape
  (order numbers failing the checks above) are left alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

PiiKind = Literal["EMAIL", "ID_NUMBER", "BANK_CARD", "PHONE"]
PLACEHOLDERS: dict[str, str] = {kind: f"[{kind}]"
                                for kind in ("EMAIL", "ID_NUMBER", "BANK_CARD", "PHONE")}


@dataclass(frozen=True, slots=True)
class Span:
    """One identifier in a text: `text[start:end]` is of `kind`."""

    start: int
    end: int
    kind: PiiKind
    text: str


# Full-width forms (common in Chinese input) are matched as their ASCII twins. The mapping is
# one character to one character, so positions in the folded text are positions in the input.
_FOLD = str.maketrans({**{chr(0xFF10 + i): str(i) for i in range(10)},
                       "＠": "@", "＋": "+", "－": "-", "（": "(", "）": ")", "　": " ",
                       "Ｘ": "X", "ｘ": "x", "．": "."})

_NOT_DIGIT_BEFORE = r"(?<![0-9])"
_NOT_DIGIT_AFTER = r"(?![0-9])"
_NOT_ALNUM_BEFORE = r"(?<![0-9A-Za-z])"
_NOT_ALNUM_AFTER = r"(?![0-9A-Za-z])"

_EMAIL = re.compile(r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9][A-Za-z0-9._%+-]*"
                    r"@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![A-Za-z0-9-])")
_DATE8 = r"(?:18|19|20)[0-9]{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12][0-9]|3[01])"
_CN_ID18 = re.compile(_NOT_ALNUM_BEFORE + r"[1-9][0-9]{5}" + _DATE8 + r"[0-9]{3}[0-9Xx]"
                      + _NOT_ALNUM_AFTER)
_CN_ID15 = re.compile(_NOT_ALNUM_BEFORE + r"[1-9][0-9]{5}[0-9]{2}(?:0[1-9]|1[0-2])"
                      r"(?:0[1-9]|[12][0-9]|3[01])[0-9]{3}" + _NOT_ALNUM_AFTER)
_US_SSN = re.compile(_NOT_DIGIT_BEFORE + r"(?!000|666|9)[0-9]{3}-(?!00)[0-9]{2}-(?!0000)[0-9]{4}"
                     + _NOT_DIGIT_AFTER)
# Card numbers: 15–19 digits in one run, or grouped by one repeated separator as printed on
# cards (4-4-4-4[-1..3], Amex 4-6-5). Free-form digit runs (two dates side by side) are not.
_CARD = re.compile(_NOT_DIGIT_BEFORE + r"(?:[2-6][0-9]{14,18}"
                   r"|[2-6][0-9]{3}([ -])[0-9]{4}\1[0-9]{4}\1[0-9]{4}(?:\1[0-9]{1,3})?"
                   r"|3[0-9]{3}([ -])[0-9]{6}\2[0-9]{5})" + _NOT_DIGIT_AFTER)
_SHORT_TAIL = re.compile(r"[ -][0-9]{1,3}$")
_CN_MOBILE = re.compile(_NOT_DIGIT_BEFORE + r"(?:(?:\+|00)86[ -]?)?1[3-9][0-9](?:[ -]?[0-9]{4}){2}"
                        + _NOT_DIGIT_AFTER)
_CN_LANDLINE = re.compile(_NOT_DIGIT_BEFORE + r"(?:\(0[1-9][0-9]{1,2}\)|0[1-9][0-9]{1,2}-)"
                          r"[ ]?[2-9][0-9]{6,7}" + _NOT_DIGIT_AFTER)
_INTERNATIONAL = re.compile(r"(?<![0-9A-Za-z+])\+[1-9][0-9]{0,3}(?:[ .-]?\(?[0-9]{1,5}\)?){1,6}"
                            + _NOT_DIGIT_AFTER)
_NANP = re.compile(_NOT_DIGIT_BEFORE + r"(?:\(\s?[2-9][0-9]{2}\s?\)\s?|[2-9][0-9]{2}[ .-])"
                   r"[2-9][0-9]{2}[ .-][0-9]{4}" + _NOT_DIGIT_AFTER)

_ID18_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_ID18_CHECK = "10X98765432"


def cn_id_checksum_ok(number: str) -> bool:
    """True if an 18-character Chinese resident ID number has a valid check character."""
    if len(number) != 18 or not number[:17].isdigit():
        return False
    total = sum(int(d) * w for d, w in zip(number[:17], _ID18_WEIGHTS))
    return _ID18_CHECK[total % 11] == number[17].upper()


def luhn_ok(digits: str) -> bool:
    """True if a string of digits passes the Luhn check used by payment cards."""
    total = 0
    for i, char in enumerate(reversed(digits)):
        d = int(char)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _digits(text: str) -> str:
    return "".join(c for c in text if c.isascii() and c.isdigit())


def _accept(kind: PiiKind, found: str) -> bool:
    digits = _digits(found)
    if kind == "BANK_CARD":
        return 13 <= len(digits) <= 19 and luhn_ok(digits)
    if kind == "PHONE" and found.startswith("+"):
        return 8 <= len(digits) <= 15
    return True


# Earlier patterns win where matches overlap: an ID number is not also a card or a phone.
_PATTERNS: tuple[tuple[PiiKind, re.Pattern[str]], ...] = (
    ("EMAIL", _EMAIL),
    ("ID_NUMBER", _CN_ID18),
    ("ID_NUMBER", _US_SSN),
    ("BANK_CARD", _CARD),
    ("PHONE", _CN_MOBILE),
    ("ID_NUMBER", _CN_ID15),
    ("PHONE", _CN_LANDLINE),
    ("PHONE", _INTERNATIONAL),
    ("PHONE", _NANP),
)


def find_pii(text: str) -> list[Span]:
    """Non-overlapping identifiers in `text`, in order of position."""
    if not any(c.isdigit() or c in "@＠" for c in text):
        return []
    folded = text.translate(_FOLD)
    spans: list[Span] = []
    for kind, pattern in _PATTERNS:
        for match in pattern.finditer(folded):
            start, end = match.span()
            found = match.group()
            if kind == "ID_NUMBER" and pattern is _CN_ID18 \
                    and not cn_id_checksum_ok(found.upper()):
                continue
            tail = _SHORT_TAIL.search(found) if kind == "BANK_CARD" else None
            if tail and not _accept(kind, found):
                # "4111 1111 1111 1111 5万元": the optional short last group was not the card's.
                found, end = found[:tail.start()], start + tail.start()
            if not _accept(kind, found):
                continue
            if any(start < s.end and s.start < end for s in spans):
                continue
            spans.append(Span(start, end, kind, text[start:end]))
    return sorted(spans, key=lambda s: s.start)


def redact(text: str) -> str:
    """`text` with every identifier replaced by its placeholder (`[PHONE]`, ...).

    Repeats until a pass finds nothing, so the result is a fixed point (idempotence): a
    rejected candidate (say 19 digits failing Luhn) can hide a shorter real one, found once its
    neighbour is replaced. Each pass removes digits, so this ends."""
    while True:
        spans = find_pii(text)
        if not spans:
            return text
        parts, last = [], 0
        for span in spans:
            parts += [text[last:span.start], PLACEHOLDERS[span.kind]]
            last = span.end
        parts.append(text[last:])
        text = "".join(parts)


def has_placeholder(text: str) -> bool:
    """True if `text` holds a redaction placeholder (such text is never a fact's value)."""
    return any(p in text for p in PLACEHOLDERS.values())
