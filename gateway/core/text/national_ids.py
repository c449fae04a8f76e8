"""National identity and tax numbers of the main locales, for `gateway.core.text.pii`
(`[ID_NUMBER]`).

Each finder takes the folded text (full-width digits as ASCII) and yields spans. False
positives are kept down the way the other finders do it: a number counts only in its
locale's written shape *and* with its check digits right; where a shape is just a run of
digits (12 for Aadhaar and My Number, 11 for the German tax id) a keyword must be near.

| locale | number | shape | check |
|---|---|---|---|
| UK | National Insurance number | AB 12 34 56 C (prefix rules) | — (shape only) |
| India | Aadhaar | 2345 6789 0123, or 12 digits near "Aadhaar"/"आधार"/"UID" | Verhoeff |
| India | PAN | ABCPE1234F (4th letter: holder type) | — (shape only) |
| Spain | DNI / NIE | 12345678Z, X1234567L | mod 23 letter |
| France | NIR (sécurité sociale) | 1 85 05 78 006 084 36 | 97 − (n mod 97) key |
| Italy | codice fiscale | RSSMRA85T10A562S | odd/even table check letter |
| Korea | resident registration number | 850101-1234567 | weighted mod 11 |
| Brazil | CPF | 123.456.789-09 | two mod 11 digits |
| Canada | SIN | 130 692 544 (first digit 1–7 or 9) | Luhn |
| Germany | Steuer-ID | 11 digits near "Steuer-ID"/"IdNr"/"Steueridentifikationsnummer" | ISO 7064 mod 11,10 |
| Japan | My Number | 12 digits near "マイナンバー"/"個人番号"/"My Number" | weighted mod 11 |
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

Finder = Callable[[str], Iterator[tuple[int, int]]]

_B = r"(?<![0-9A-Za-z])"  # not glued to a longer word or number
_A = r"(?![0-9A-Za-z])"
_KEYWORD_WINDOW = 40


def _digits(text: str) -> str:
    return "".join(c for c in text if c.isdigit())


def _checked(pattern: str, ok: Callable[[str], bool]) -> Finder:
    compiled = re.compile(_B + pattern + _A)

    def find(folded: str) -> Iterator[tuple[int, int]]:
        return (m.span() for m in compiled.finditer(folded) if ok(m.group()))
    return find


def _near(keyword: str, number: str, ok: Callable[[str], bool]) -> Finder:
    """`number` within a short window after `keyword` (same line)."""
    keywords = re.compile(keyword)
    numbers = re.compile(_B + number + _A)

    def find(folded: str) -> Iterator[tuple[int, int]]:
        for found in keywords.finditer(folded):
            end = min(len(folded), found.end() + _KEYWORD_WINDOW)
            newline = folded.find("\n", found.end(), end)
            match = numbers.search(folded, found.end(), newline if newline != -1 else end)
            if match is not None and ok(match.group()):
                yield match.span()
    return find


# -- check digits ----------------------------------------------------------------------------

_VERHOEFF_D = [
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 3, 4, 0, 6, 7, 8, 9, 5],
    [2, 3, 4, 0, 1, 7, 8, 9, 5, 6], [3, 4, 0, 1, 2, 8, 9, 5, 6, 7],
    [4, 0, 1, 2, 3, 9, 5, 6, 7, 8], [5, 9, 8, 7, 6, 0, 4, 3, 2, 1],
    [6, 5, 9, 8, 7, 1, 0, 4, 3, 2], [7, 6, 5, 9, 8, 2, 1, 0, 4, 3],
    [8, 7, 6, 5, 9, 3, 2, 1, 0, 4], [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]]
_VERHOEFF_P = [[0, 1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 5, 7, 6, 2, 8, 3, 0, 9, 4]]
for _ in range(6):
    _VERHOEFF_P.append([_VERHOEFF_P[1][d] for d in _VERHOEFF_P[-1]])


def verhoeff_ok(digits: str) -> bool:
    check = 0
    for i, d in enumerate(reversed(digits)):
        check = _VERHOEFF_D[check][_VERHOEFF_P[i % 8][int(d)]]
    return check == 0


def _aadhaar_ok(text: str) -> bool:
    digits = _digits(text)
    return len(digits) == 12 and digits[0] not in "01" and verhoeff_ok(digits)


_DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"


def _dni_ok(text: str) -> bool:
    text = text.replace("-", "").replace(" ", "").upper()
    body = str("XYZ".index(text[0])) + text[1:-1] if text[0] in "XYZ" else text[:-1]
    return _DNI_LETTERS[int(body) % 23] == text[-1]


def _nir_ok(text: str) -> bool:
    compact = text.replace(" ", "").upper()
    body, key = compact[:13], compact[13:]
    body = body.replace("2A", "19").replace("2B", "18")
    return body.isdigit() and int(key) == 97 - int(body) % 97


_CF_ODD = dict(zip("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ",
                   [1, 0, 5, 7, 9, 13, 15, 17, 19, 21, 1, 0, 5, 7, 9, 13, 15, 17, 19, 21, 2, 4,
                    18, 20, 11, 3, 6, 8, 12, 14, 16, 10, 22, 25, 24, 23]))


def _codice_fiscale_ok(text: str) -> bool:
    text = text.upper()
    total = sum(_CF_ODD[c] if i % 2 == 0 else (int(c) if c.isdigit() else ord(c) - 65)
                for i, c in enumerate(text[:15]))
    return chr(65 + total % 26) == text[15]


def _rrn_ok(text: str) -> bool:
    digits = _digits(text)
    weights = (2, 3, 4, 5, 6, 7, 8, 9, 2, 3, 4, 5)
    total = sum(int(d) * w for d, w in zip(digits, weights))
    return (11 - total % 11) % 10 == int(digits[12])


def _cpf_ok(text: str) -> bool:
    digits = [int(d) for d in _digits(text)]
    if len(set(digits)) == 1:
        return False  # 111.111.111-11 passes the arithmetic and is no one's
    for n in (9, 10):
        total = sum(d * w for d, w in zip(digits[:n], range(n + 1, 1, -1)))
        if (total * 10 % 11) % 10 != digits[n]:
            return False
    return True


def _sin_ok(text: str) -> bool:
    digits = _digits(text)
    total = 0
    for i, c in enumerate(reversed(digits)):
        d = int(c) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def _steuer_id_ok(text: str) -> bool:
    digits = _digits(text)
    if len(digits) != 11 or digits[0] == "0":
        return False
    product = 10
    for d in digits[:10]:
        total = (int(d) + product) % 10 or 10
        product = total * 2 % 11
    return (11 - product) % 10 == int(digits[10])


def _my_number_ok(text: str) -> bool:
    digits = [int(d) for d in _digits(text)]
    if len(digits) != 12:
        return False
    body = digits[:11][::-1]
    # Digit n from the right (1-based) weighs n + 1 up to 6, n - 5 beyond.
    total = sum(p * (n + 2 if n < 6 else n - 4) for n, p in enumerate(body))
    remainder = total % 11
    return digits[11] == (0 if remainder <= 1 else 11 - remainder)


FINDERS: tuple[Finder, ...] = (
    _checked(r"[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z](?<!BG|GB|NK|KN|TN|NT|ZZ)"
             r" ?[0-9]{2} ?[0-9]{2} ?[0-9]{2} ?[A-D]", lambda _: True),
    _checked(r"[2-9][0-9]{3}([ -])[0-9]{4}\1[0-9]{4}", _aadhaar_ok),
    _near(r"(?i)aadhaa?r|आधार|(?<![a-z])uid(?![a-z])", r"[2-9][0-9]{3} ?[0-9]{4} ?[0-9]{4}",
          _aadhaar_ok),
    _checked(r"[A-Z]{3}[PCHFATBLJG][A-Z][0-9]{4}[A-Z]", lambda _: True),
    _checked(r"(?:[0-9]{8}|[XYZ][0-9]{7})-?[A-Z]", _dni_ok),
    _checked(r"[12] ?[0-9]{2} ?(?:0[1-9]|1[0-2]|[2-9][0-9]) ?(?:[0-9]{2}|2[AB]) ?[0-9]{3}"
             r" ?[0-9]{3} ?[0-9]{2}", _nir_ok),
    _checked(r"[A-Z]{6}[0-9]{2}[ABCDEHLMPRST][0-9]{2}[A-Z][0-9]{3}[A-Z]", _codice_fiscale_ok),
    _checked(r"[0-9]{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12][0-9]|3[01])-[1-4][0-9]{6}", _rrn_ok),
    _checked(r"[0-9]{3}\.[0-9]{3}\.[0-9]{3}-[0-9]{2}", _cpf_ok),
    _checked(r"[1-79][0-9]{2}([ -])[0-9]{3}\1[0-9]{3}", _sin_ok),
    _near(r"(?i)steuer-?id|steueridentifikationsnummer|(?<![a-z])idnr(?![a-z])|"
          r"identifikationsnummer", r"[1-9][0-9] ?[0-9]{3} ?[0-9]{3} ?[0-9]{3}", _steuer_id_ok),
    _near(r"(?i)マイナンバー|個人番号|my ?number", r"[0-9]{4} ?[0-9]{4} ?[0-9]{4}", _my_number_ok),
)
