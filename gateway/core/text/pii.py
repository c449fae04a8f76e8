"""Personal identifiers found in text, and text with them replaced by typed placeholders.

Memory layers (summaries, facts, profile) store and recall `redact(text)`, never the raw text;
the verbatim transcript keeps what the user sent.

Detected (ASCII or full-width digits, spaces or dashes between digit groups):
- `[EMAIL]`: e-mail addresses;
- `[ID_NUMBER]`: Chinese resident ID numbers (18 characters, the last may be X, with a valid
  birth date and checksum; the legacy 15-digit form with a valid birth date), US social
  security numbers in their dashed form (AAA-GG-SSSS), and the national identity and tax
  numbers of `gateway.core.text.national_ids` (UK, India, Spain, France, Italy, Korea, Brazil,
  Canada, Germany, Japan — each in its written shape with its check digits);
- `[BANK_CARD]`: card numbers starting 2–6 that pass the Luhn check: 15–19 digits in one run,
  or 13–19 digits grouped as printed on cards (4-4-4-4, 4-4-4-4-3, Amex 4-6-5);
- `[PHONE]`: Chinese mobile numbers (1[3-9]x, 11 digits, optional +86 / 0086), Chinese
  landlines with an area code (010-12345678), international numbers written with a leading `+`
  (8–15 digits) and North American grouped forms ((415) 555-2671, 415-555-2671);
- `[IBAN]`: international bank account numbers, compact or in groups of four, of a known
  country's exact length and passing the ISO 13616 mod-97 check;
- `[IP_ADDRESS]`: IPv4 (dotted quad, not part of a longer dotted run, not after `v` or the
  word version) and IPv6 (validated; at least three groups and a digit); loopback,
  unspecified and broadcast addresses identify nobody and are kept;
- `[SWIFT_BIC]`: SWIFT/BIC codes (bank 4 letters, a real ISO country, location, branch):
  after the word SWIFT or BIC, or alone only in the strict 11-character form whose branch is
  XXX or whose location/branch holds a digit — an ordinary capitalised word never is one;
- `[PASSPORT]`: 6–9 capitals and digits (at least one digit) within 40 characters after a
  passport keyword (passport, 护照, パスポート, Reisepass, passeport, pasaporte, ...).

Invariants (tests/unit/test_pii.py, with hypothesis):
- `redact` is idempotent: `redact(redact(x)) == redact(x)` (it repeats until nothing is found);
- text with no digit, no `@` and no SWIFT/BIC keyword is returned unchanged; placeholders
  contain none of them;
- dates, years, amounts (`2023-03-01`, `50,000`, `30万元`) and digit runs without a PII shape
  (order numbers failing the checks above) are left alone.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Callable, Iterator, Literal

from gateway.core.text import national_ids

PiiKind = Literal["EMAIL", "ID_NUMBER", "BANK_CARD", "PHONE", "IBAN", "IP_ADDRESS",
                  "SWIFT_BIC", "PASSPORT"]
PLACEHOLDERS: dict[str, str] = {kind: f"[{kind}]" for kind in (
    "EMAIL", "ID_NUMBER", "BANK_CARD", "PHONE", "IBAN", "IP_ADDRESS", "SWIFT_BIC", "PASSPORT")}


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


# -- IBAN, IP addresses, SWIFT/BIC, passports ----------------------------------------------

# IBAN length per country (SWIFT's IBAN registry); a country not listed has no IBAN.
_IBAN_LENGTHS = {c: int(n) for c, n in (item.split(":") for item in (
    "AD:24 AE:23 AL:28 AT:20 AZ:28 BA:20 BE:16 BG:22 BH:22 BI:27 BR:29 BY:28 CH:21 CR:22 "
    "CY:28 CZ:24 DE:22 DJ:27 DK:18 DO:28 EE:20 EG:29 ES:24 FI:18 FK:18 FO:18 FR:27 GB:22 "
    "GE:22 GI:23 GL:18 GR:27 GT:28 HN:28 HR:21 HU:28 IE:22 IL:23 IQ:23 IS:26 IT:27 JO:30 "
    "KW:30 KZ:20 LB:28 LC:32 LI:21 LT:20 LU:20 LV:21 LY:25 MC:27 MD:24 ME:22 MK:19 MN:20 "
    "MR:27 MT:31 MU:30 NI:28 NL:18 NO:15 OM:23 PK:24 PL:28 PS:29 PT:25 QA:29 RO:24 RS:22 "
    "RU:33 SA:24 SC:31 SD:18 SE:24 SI:19 SK:24 SM:27 SO:23 ST:25 SV:28 TL:23 TN:24 TR:26 "
    "UA:29 VA:22 VG:24 XK:20 YE:30").split())}
_IBAN_START = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}[0-9]{2}(?=[ ]?[A-Z0-9])")

# ISO 3166-1 alpha-2, for the country part of a SWIFT/BIC code.
_COUNTRIES = frozenset((
    "AD AE AF AG AI AL AM AO AQ AR AS AT AU AW AX AZ BA BB BD BE BF BG BH BI BJ BL BM BN BO BQ "
    "BR BS BT BV BW BY BZ CA CC CD CF CG CH CI CK CL CM CN CO CR CU CV CW CX CY CZ DE DJ DK DM "
    "DO DZ EC EE EG EH ER ES ET FI FJ FK FM FO FR GA GB GD GE GF GG GH GI GL GM GN GP GQ GR GS "
    "GT GU GW GY HK HM HN HR HT HU ID IE IL IM IN IO IQ IR IS IT JE JM JO JP KE KG KH KI KM KN "
    "KP KR KW KY KZ LA LB LC LI LK LR LS LT LU LV LY MA MC MD ME MF MG MH MK ML MM MN MO MP MQ "
    "MR MS MT MU MV MW MX MY MZ NA NC NE NF NG NI NL NO NP NR NU NZ OM PA PE PF PG PH PK PL PM "
    "PN PR PS PT PW PY QA RE RO RS RU RW SA SB SC SD SE SG SH SI SJ SK SL SM SN SO SR SS ST SV "
    "SX SY SZ TC TD TF TG TH TJ TK TL TM TN TO TR TT TV TW TZ UA UG UM US UY UZ VA VC VE VG VI "
    "VN VU WF WS XK YE YT ZA ZM ZW").split())
_BIC = re.compile(r"(?<![A-Za-z0-9])[A-Z]{4}([A-Z]{2})([A-Z0-9]{2})([A-Z0-9]{3})?"
                  r"(?![A-Za-z0-9])")
_BIC_KEYWORD = re.compile(r"(?i)(?<![a-z])(?:swift|bic)(?![a-z])")
_BIC_CONTEXT = 40

_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_IPV4 = re.compile(r"(?<![0-9A-Za-z.])" + rf"{_OCTET}(?:\.{_OCTET}){{3}}"
                   + r"(?![0-9]|\.[0-9])")
_VERSION_BEFORE = re.compile(r"(?i)(?:version|ver\.?|release|版本|v)\s*[:：]?\s*$")
_IPV6 = re.compile(r"(?<![0-9A-Za-z:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}"
                   r"(?![0-9A-Za-z:])")

_PASSPORT_KEYWORD = re.compile(
    r"(?i)(?<![a-z])(?:passports?|passeport|reisepass|pasaporte|passaporto|paspoort|"
    r"паспорт)|护照|護照|旅券|パスポート|여권")
_PASSPORT_NUMBER = re.compile(r"(?<![A-Za-z0-9])(?=[A-Z]*[0-9])[A-Z0-9]{6,9}(?![A-Za-z0-9])")
_PASSPORT_WINDOW = 40


def iban_ok(iban: str) -> bool:
    """True if a compact IBAN has its country's length and passes the mod-97 check."""
    iban = iban.upper()
    if _IBAN_LENGTHS.get(iban[:2]) != len(iban) or not iban.isalnum() or not iban.isascii():
        return False
    rearranged = iban[4:] + iban[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def _ibans(folded: str) -> Iterator[tuple[int, int]]:
    for match in _IBAN_START.finditer(folded):
        length = _IBAN_LENGTHS.get(match.group()[:2])
        if length is None:
            continue
        # Take exactly the country's number of characters, single spaces allowed between
        # them; what follows ("... 00 EUR") is not part of it.
        chars, i = [], match.start()
        while i < len(folded) and len(chars) < length:
            c = folded[i]
            if c.isascii() and (c.isdigit() or c.isupper()):
                chars.append(c)
            elif not (c == " " and chars and i + 1 < len(folded) and folded[i + 1] != " "):
                break
            i += 1
        glued = i < len(folded) and folded[i].isascii() and folded[i].isalnum()
        if len(chars) == length and not glued and iban_ok("".join(chars)):
            yield match.start(), i


def _ipv4s(folded: str) -> Iterator[tuple[int, int]]:
    for match in _IPV4.finditer(folded):
        if _VERSION_BEFORE.search(folded[max(0, match.start() - 12):match.start()]):
            continue  # "version 1.2.3.4", "v1.2.3.4": a version number
        address = ipaddress.IPv4Address(match.group())
        if not (address.is_loopback or address.is_unspecified
                or address == ipaddress.IPv4Address("255.255.255.255")):
            yield match.span()


def _ipv6s(folded: str) -> Iterator[tuple[int, int]]:
    for match in _IPV6.finditer(folded):
        start, text = match.start(), match.group()
        if text.endswith(":") and not text.endswith("::"):
            text = text[:-1]  # "at fe80::1: the gateway"
        groups = [g for g in text.split(":") if g]
        if len(groups) < 3 or not any(c.isdigit() for c in text):
            continue  # "a::b", "std::vector", slices: not addresses anyone writes
        try:
            address = ipaddress.IPv6Address(text)
        except ValueError:
            continue  # times (12:30:45), MAC addresses
        if not (address.is_loopback or address.is_unspecified):
            yield start, start + len(text)


def _bics(folded: str) -> Iterator[tuple[int, int]]:
    for match in _BIC.finditer(folded):
        country, location, branch = match.groups()
        if country not in _COUNTRIES:
            continue
        before = folded[max(0, match.start() - _BIC_CONTEXT):match.start()]
        strict = branch is not None and (
            branch == "XXX" or any(c.isdigit() for c in location + branch))
        if strict or _BIC_KEYWORD.search(before):
            yield match.span()


def _passports(folded: str) -> Iterator[tuple[int, int]]:
    for keyword in _PASSPORT_KEYWORD.finditer(folded):
        window_end = min(len(folded), keyword.end() + _PASSPORT_WINDOW)
        newline = folded.find("\n", keyword.end(), window_end)
        window_end = newline if newline != -1 else window_end
        match = _PASSPORT_NUMBER.search(folded, keyword.end(), window_end)
        if match is not None:
            yield match.span()


def _cn_id18s(folded: str) -> Iterator[tuple[int, int]]:
    return (m.span() for m in _CN_ID18.finditer(folded) if cn_id_checksum_ok(m.group().upper()))


def _regex(pattern: re.Pattern[str]) -> Callable[[str], Iterator[tuple[int, int]]]:
    def spans(folded: str) -> Iterator[tuple[int, int]]:
        return (m.span() for m in pattern.finditer(folded))
    return spans


def _digits(text: str) -> str:
    return "".join(c for c in text if c.isascii() and c.isdigit())


def _accept(kind: PiiKind, found: str) -> bool:
    digits = _digits(found)
    if kind == "BANK_CARD":
        return 13 <= len(digits) <= 19 and luhn_ok(digits)
    if kind == "PHONE" and found.startswith("+"):
        return 8 <= len(digits) <= 15
    return True


# Earlier finders win where matches overlap: an ID number is not also a card or a phone, an
# IBAN's digit groups are not a card.
_FINDERS: tuple[tuple[PiiKind, Callable[[str], Iterator[tuple[int, int]]]], ...] = (
    ("EMAIL", _regex(_EMAIL)),
    ("IBAN", _ibans),
    ("ID_NUMBER", _cn_id18s),
    ("ID_NUMBER", _regex(_US_SSN)),
    *(("ID_NUMBER", finder) for finder in national_ids.FINDERS),
    ("BANK_CARD", _regex(_CARD)),
    ("IP_ADDRESS", _ipv4s),
    ("IP_ADDRESS", _ipv6s),
    ("PHONE", _regex(_CN_MOBILE)),
    ("ID_NUMBER", _regex(_CN_ID15)),
    ("PHONE", _regex(_CN_LANDLINE)),
    ("PHONE", _regex(_INTERNATIONAL)),
    ("PHONE", _regex(_NANP)),
    ("SWIFT_BIC", _bics),
    ("PASSPORT", _passports),
)


_TRIGGER = re.compile(r"[\d@＠]")
"""Every identifier but a BIC has a digit or an at sign: text without one is skipped (one C
scan instead of a Python loop over its characters)."""


def find_pii(text: str) -> list[Span]:
    """Non-overlapping identifiers in `text`, in order of position."""
    if not _TRIGGER.search(text) and not _BIC_KEYWORD.search(text):
        return []
    folded = text.translate(_FOLD)
    spans: list[Span] = []
    for kind, finder in _FINDERS:
        for start, end in finder(folded):
            found = folded[start:end]
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
