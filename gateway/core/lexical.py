"""Tokens for lexical (BM25) search, in any script.

Space-separated scripts are split into lowercase words; CJK text (Han, kana) has no spaces, so
each run of it becomes its characters and its character bigrams: "我住在北京" matches a query
for "北京" through the bigram, and single characters still match when no bigram does.

Invariants: pure and deterministic; text is NFKC-normalised first, so full-width letters and
digits ("ＡＢＣ１２３") match their ASCII forms; no token is empty; digits are kept (an exact
locker number or date is what lexical search is for).
"""

from __future__ import annotations

import re
import unicodedata

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")

# Function words that carry no topic. Small on purpose: BM25's IDF already discounts common
# words; this list only keeps a question's grammar from outweighing its one content word.
ENGLISH_STOPWORDS = frozenset(
    "a an and are as at be been but by did do does for from had has have he her him his how "
    "i if in into is it its me my of on or our s she so t than that the their them then "
    "there they this to us was we were what when where which who whom why will with would "
    "you your".split())


def tokens(text: str, *, stopwords: frozenset[str] = ENGLISH_STOPWORDS) -> list[str]:
    """The lexical tokens of `text`, in order (duplicates kept: term frequency matters)."""
    out: list[str] = []
    for word in _WORD.findall(unicodedata.normalize("NFKC", text).lower()):
        position = 0
        for run in _CJK_RUN.finditer(word):
            _add_word(out, word[position:run.start()], stopwords)
            _add_cjk(out, run.group(0))
            position = run.end()
        _add_word(out, word[position:], stopwords)
    return out


def _add_word(out: list[str], word: str, stopwords: frozenset[str]) -> None:
    if word and word not in stopwords:
        out.append(word)


def _add_cjk(out: list[str], run: str) -> None:
    out.extend(run)
    out.extend(run[i:i + 2] for i in range(len(run) - 1))
