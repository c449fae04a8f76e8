"""Tokens for lexical (BM25) search, in any script.

Space-separated scripts are split into lowercase words; CJK text (Han, kana) has no spaces, so
each run of it becomes either its characters and its character bigrams (the default: "我住在北京"
matches a query for "北京" through the bigram, and single characters still match when no bigram
does), or the words a `segment` function cuts it into (the gateway's lexical index passes a
dictionary segmenter: gateway/memory/search/segmentation.py). Function words are left out in
both kinds of script (stopword lists below).

Invariants: pure and deterministic; text is NFKC-normalised first, so full-width letters and
digits ("ＡＢＣ１２３") match their ASCII forms; no token is empty; digits are kept (an exact
locker number or date is what lexical search is for).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Callable, Iterable

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")

# Function words that carry no topic. Small on purpose: BM25's IDF already discounts common
# words; this list only keeps a question's grammar from outweighing its one content word.
ENGLISH_STOPWORDS = frozenset(
    "a an and are as at be been but by did do does for from had has have he her him his how "
    "i if in into is it its me my of on or our s she so t than that the their them then "
    "there they this to us was we were what when where which who whom why will with would "
    "you your".split())
# The same for Chinese, whose tokens are characters and character bigrams: a question's
# 什么时候 / 哪里 / 多少 would otherwise match every other question in the conversation
# ("婚礼定在什么时候？") as strongly as its topic matches the answer (docs/decisions.md,
# "Chinese function words are not search terms"). A character alone is dropped if it is here;
# a bigram if both of its characters are, or if it is one of the function-word bigrams below.
CHINESE_FUNCTION_CHARS = frozenset(
    "的了是在吗呢吧啊呀么什哪谁几多少怎时候这那个们也都就和或着过被把给让我你他她它")
CHINESE_FUNCTION_BIGRAMS = frozenset(
    "时候 什么 么时 怎么 为什 哪里 哪儿 多少 怎样 几个 一个 这个 那个 我们 你们 他们 她们 "
    "是不 有没 没有 可以 知道 觉得".split())


Segmenter = Callable[[str], Iterable[str]]
"""Cuts one run of CJK characters into words, in order (their concatenation is the run)."""


def tokens(text: str, *, stopwords: frozenset[str] = ENGLISH_STOPWORDS,
           segment: Segmenter | None = None) -> list[str]:
    """The lexical tokens of `text`, in order (duplicates kept: term frequency matters).
    `segment`: CJK runs become its words (less function words) instead of characters and
    character bigrams."""
    out: list[str] = []
    for word in _WORD.findall(unicodedata.normalize("NFKC", text).lower()):
        position = 0
        for run in _CJK_RUN.finditer(word):
            _add_word(out, word[position:run.start()], stopwords)
            if segment is None:
                _add_cjk(out, run.group(0))
            else:
                out.extend(w for w in segment(run.group(0)) if not function_word(w))
            position = run.end()
        _add_word(out, word[position:], stopwords)
    return out


def function_word(word: str) -> bool:
    """A CJK word that carries no topic: a function bigram, or function characters only."""
    return word in CHINESE_FUNCTION_BIGRAMS or all(c in CHINESE_FUNCTION_CHARS for c in word)


def _add_word(out: list[str], word: str, stopwords: frozenset[str]) -> None:
    if word and word not in stopwords:
        out.append(word)


def _add_cjk(out: list[str], run: str) -> None:
    out.extend(c for c in run if c not in CHINESE_FUNCTION_CHARS)
    out.extend(b for i in range(len(run) - 1)
               if (b := run[i:i + 2]) not in CHINESE_FUNCTION_BIGRAMS
               and not (b[0] in CHINESE_FUNCTION_CHARS and b[1] in CHINESE_FUNCTION_CHARS))
