"""Text normalisation, answer parts and content tokens — for English and for text without
spaces (Chinese, Japanese).

- `collapse`: NFKC and whitespace collapsed to single spaces, nothing else (how a turn's text
  is compared for verbatim presence, REFERENCE.md).
- `normalise`: NFKC, lowercase, punctuation and symbols become spaces, the English articles
  a/an/the are dropped, whitespace collapses to single spaces, and spaces between two CJK
  characters are removed (so "你好，世界" and "你好世界" normalise alike).
- `answer_parts`: a gold answer split into parts on commas, " and ", and the Chinese
  separators 、，；(also ;) — each part normalised, empty parts dropped.
- `contains`: a normalised part occurs in a normalised text; a part that starts (ends) with a
  Latin letter or digit must start (end) on a word boundary ("cat" is not in "category").
- `content_tokens`: the set of words minus English stopwords for space-separated text; for
  runs of CJK characters, their character bigrams (a lone character stands for itself), minus
  bigrams made only of very common function characters.
"""

from __future__ import annotations

import re
import unicodedata

# Han, kana, hangul, CJK punctuation-free ranges (punctuation is stripped before this is used).
_CJK_RANGES = ("\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
               "\U00020000-\U0002ffff")
_CJK = f"[{_CJK_RANGES}]"
_CJK_SPACE = re.compile(f"(?<={_CJK}) (?={_CJK})")
_CJK_RUN = re.compile(f"{_CJK}+")
_LATIN_WORDISH = re.compile(f"[^\\W{_CJK_RANGES}]")
_ARTICLES = frozenset({"a", "an", "the"})
_PART_SPLIT = re.compile(r"\s*(?:,|;|、|，|；|\band\b)\s*")

STOPWORDS = frozenset("""
a about above after again against all am an and any are aren't as at be because been before
being below between both but by can could did do does doing don't down during each few for
from further had has have having he her here hers herself him himself his how i if in into is
it its itself just let's me more most my myself no nor not now of off on once only or other
our ours ourselves out over own same she should so some such than that that's the their
theirs them themselves then there these they this those through to too under until up very
was we were what when where which while who whom why will with would you your yours yourself
yourselves im ive id ill youre youve theyre dont didnt doesnt isnt wasnt cant wont s t ll re
ve d m o yes yeah oh hey hi wow really also got get just like so thanks thank
""".split())
# Characters so common in Chinese that a bigram made only of them says nothing.
CJK_STOP_CHARS = frozenset("的了是在我你他她它们这那有和就也都而及与着或一个不吗呢吧啊")


class _SpaceTable(dict[int, str]):
    """str.translate table: punctuation, symbols, separators and control characters become a
    space, every other character stays; filled on first sight of a character."""

    def __missing__(self, code: int) -> str:
        char = chr(code)
        value = self[code] = " " if unicodedata.category(char)[0] in "PSZC" else char
        return value


_SPACES = _SpaceTable()


def collapse(text: object) -> str:
    """NFKC, whitespace runs collapsed to one space, stripped."""
    return " ".join(unicodedata.normalize("NFKC", str(text)).split())


def normalise(text: object) -> str:
    """See the module docstring. Idempotent: normalise(normalise(x)) == normalise(x)."""
    folded = unicodedata.normalize("NFKC", str(text)).lower()
    spaced = folded.translate(_SPACES)
    words = [w for w in spaced.split() if w not in _ARTICLES]
    return _CJK_SPACE.sub("", " ".join(words))


def answer_parts(answer: object) -> list[str]:
    """The normalised, non-empty parts of a gold answer (one part if it has no separators)."""
    folded = unicodedata.normalize("NFKC", str(answer))
    parts = [normalise(p) for p in _PART_SPLIT.split(folded)]
    return [p for p in parts if p]


def contains(text: str, part: str) -> bool:
    """Whether normalised `part` occurs in normalised `text` (word boundaries as documented)."""
    if not part:
        return False
    left = r"(?<!\w)" if _LATIN_WORDISH.match(part[0]) else ""
    right = r"(?!\w)" if _LATIN_WORDISH.match(part[-1]) else ""
    if not left and not right:
        return part in text
    # \w includes CJK: a Latin word directly next to Chinese characters is still a word.
    boundary_left = left.replace(r"\w", f"[^\\W{_CJK_RANGES}]") if left else ""
    boundary_right = right.replace(r"\w", f"[^\\W{_CJK_RANGES}]") if right else ""
    return re.search(boundary_left + re.escape(part) + boundary_right, text) is not None


def content_tokens(text: object) -> frozenset[str]:
    """Content tokens of `text` (see the module docstring)."""
    tokens: set[str] = set()
    for word in normalise(text).split():
        pos = 0
        for run in _CJK_RUN.finditer(word):
            _add_word(tokens, word[pos:run.start()])
            _add_cjk(tokens, run.group())
            pos = run.end()
        _add_word(tokens, word[pos:])
    return frozenset(tokens)


def _add_word(tokens: set[str], word: str) -> None:
    if word and word not in STOPWORDS:
        tokens.add(word)


def _add_cjk(tokens: set[str], run: str) -> None:
    if len(run) == 1:
        if run not in CJK_STOP_CHARS:
            tokens.add(run)
        return
    for a, b in zip(run, run[1:]):
        if not (a in CJK_STOP_CHARS and b in CJK_STOP_CHARS):
            tokens.add(a + b)
