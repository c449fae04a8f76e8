"""The extractive summariser: the most important sentences of a span, kept verbatim.

Used when no LLM is configured for summaries, when the LLM fails, and to merge old chunks.
Invariants (tests/unit/test_extractive.py):
- it never invents text: every kept sentence is a verbatim piece of one utterance (only the
  speaker labels, the optional date anchor, and " …" after a sentence cut to fit are added);
- kept sentences appear in their original order, grouped per utterance behind its label;
- the result counts at most `target_tokens` with the given tokenizer ("" if nothing fits).

Importance (`score_sentence`): named entities (capitalised words, acronyms, CJK names and
places, Latin words inside CJK text), numbers, dates and times, amounts, the tenant's keywords,
decision and preference words, requests to remember; user statements weigh more than the
assistant's, fillers ("ok", "好的") and very short sentences little. English and Chinese
(。！？) are split into sentences.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence

from gateway.core.text.tokens import Tokenizer

TRUNCATED = " …"
MIN_SCORE = 0.25
"""Sentences scoring less (fillers such as "ok", "谢谢") are never kept, even with room left."""


@dataclass(frozen=True, slots=True)
class Utterance:
    """One message's (redacted) text and who said it."""

    role: str
    text: str
    label: str | None = None
    """The speaker label written before its sentences; None: the role, capitalised; "": none."""

    @property
    def prefix(self) -> str:
        label = self.role.capitalize() if self.label is None else self.label
        return f"{label}: " if label else ""


_CJK_CHAR = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
_CJK = re.compile(f"[{_CJK_CHAR}]")
_CLOSERS = "\"'”’」』）)】》"
# A sentence ends at CJK enders (no space needed), at !/? before space, CJK or the end, and at
# a period before space, CJK or the end — not inside "3.5" or "e.g.".
_BOUNDARY = re.compile(
    rf"(?:[。！？]+|…+|[!?]+(?=[\s{_CLOSERS}{_CJK_CHAR}]|$)|\.+(?=[\s{_CLOSERS}{_CJK_CHAR}]|$))"
    rf"[{_CLOSERS}]*")
_ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc",
                            "e.g", "i.e", "inc", "ltd", "co", "no", "approx", "a.m", "p.m",
                            "u.s", "fig", "mt"})
_WORD_BEFORE = re.compile(r"([A-Za-z][A-Za-z.]*)$")
_MIN_FRAGMENT = 3  # shorter pieces ("1.", "a)") join the next sentence


def split_sentences(text: str) -> list[str]:
    """`text` cut into sentences (lines first), stripped; fenced code blocks are left out."""
    sentences: list[str] = []
    in_code = False
    for line in text.splitlines():
        if line.strip().startswith("```"):
            in_code = not in_code
            continue
        if in_code or not line.strip():
            continue
        start = 0
        pieces = []
        for match in _BOUNDARY.finditer(line):
            if match.group().startswith(".") and _is_abbreviation(line[start:match.start()]):
                continue
            pieces.append(line[start:match.end()])
            start = match.end()
        pieces.append(line[start:])
        carry = ""  # raw text, so a joined sentence stays verbatim
        for piece in pieces:
            carry += piece
            sentence = carry.strip()
            if not sentence or (len(sentence) < _MIN_FRAGMENT and not _CJK.search(sentence)):
                continue
            sentences.append(sentence)
            carry = ""
        if carry.strip():
            sentences.append(carry.strip())
    return sentences


def _is_abbreviation(before: str) -> bool:
    match = _WORD_BEFORE.search(before)
    if not match:
        return False
    word = match[1].lower()
    # A single capital before the period is an initial ("J. K. Rowling").
    return word.rstrip(".") in _ABBREVIATIONS or (len(word) == 1 and match[1].isupper())


_MONTH_NAMES = (r"January|February|March|April|June|July|August|September|October|November|"
                r"December|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept?|Oct|Nov|Dec")
# Every run of digits or spaces is bounded and a number is matched from its start only: an
# unbounded `\d+\s*年` backtracked over a 200,000-digit message for hours (quadratic), on the
# loop that runs memory.
_DATE = re.compile(
    rf"\b\d{{4}}[-/.]\d{{1,2}}[-/.]\d{{1,2}}\b|\b\d{{1,2}}[/.]\d{{1,2}}(?:[/.]\d{{2,4}})?\b"
    rf"|\b(?:{_MONTH_NAMES})\b\.?|\bMay\s+\d|\d\s+May\b"
    r"|\b(?:mon|tues|wednes|thurs|fri|satur|sun)day\b"
    r"|\b(?:today|tomorrow|yesterday|tonight|weekend|next (?:week|month|year)"
    r"|last (?:week|month|year|night)|this (?:week|month|year))\b"
    r"|\b\d{1,2}(?::\d{2})?\s*(?:am|pm)\b|\b\d{1,2}:\d{2}\b"
    r"|(?<!\d)\d{1,6}\s{0,3}年|(?<!\d)\d{1,2}\s{0,3}月(?:\s{0,3}\d{1,2}\s{0,3}[日号])?"
    r"|[一二三四五六七八九十]+月|星期[一二三四五六日天]"
    r"|周[一二三四五六日末]|[今明昨后前]天|[今明去前]年|[上下]个?(?:周|星期|月)|[早晚]上|凌晨|中午|下午",
    re.IGNORECASE)
_AMOUNT = re.compile(
    r"[$€£¥￥]\s?\d|(?<![\d,.])\d[\d,.]{0,30}\s{0,3}(?:k\b|元|块|万|亿|美元|欧元|英镑|日元"
    r"|dollars?\b|euros?\b|usd\b|eur\b|gbp\b|rmb\b|cny\b|percent\b|%)", re.IGNORECASE)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*|[零一二两三四五六七八九十百千万亿]+"
                     r"(?=个|次|年|月|日|号|天|岁|元|块|人|点|分|公里|米|斤|本|张|家|位|周|小时)")
_CAPITALISED = re.compile(r"\b[A-Z][a-zA-Z'’-]+|\b[A-Z]{2,}\b")
_NOT_ENTITIES = frozenset({"I", "I'm", "I'll", "I've", "I'd", "OK", "Okay", "Yes", "No", "The",
                           "A", "An", "It", "This", "That", "We", "You", "He", "She", "They"})
_CJK_ENTITY = re.compile(
    rf"[{_CJK_CHAR}]{{1,8}}?(?:市|省|县|区|镇|村|路|街|国|公司|集团|大学|学院|中学|小学|医院"
    rf"|银行|酒店|机场|车站|先生|女士|小姐|老师|教授|医生|经理|总监)"
    rf"|(?:我叫|名叫|叫做|姓)[{_CJK_CHAR}]{{1,4}}")
_LATIN_WORD = re.compile(r"[A-Za-z][A-Za-z0-9+#._-]*")
_DECISION = re.compile(
    r"\b(?:decid\w*|agree\w*|will|won't|going to|plan\w*|prefer\w*|chose|choose|must|need to"
    r"|want to|booked|confirmed|deadline|allergic|always|never)\b"
    r"|决定|打算|计划|确定|选定|同意|必须|需要|预订|喜欢|偏好|过敏|总是|从不", re.IGNORECASE)
_REMEMBER = re.compile(r"\b(?:remember|don't forget|keep in mind|note that)\b|记住|记得|别忘",
                       re.IGNORECASE)
_FILLERS = frozenset({"ok", "okay", "thanks", "thank you", "thanks a lot", "sure", "yes", "no",
                      "hi", "hello", "hey", "hi there", "hello there", "great", "cool",
                      "got it", "bye", "goodbye", "好的", "好",
                      "谢谢", "嗯", "是的", "你好", "没问题", "明白了", "再见", "对"})
_ROLE_WEIGHT = {"user": 1.3, "assistant": 1.0, "tool": 0.6, "function": 0.6}


def score_sentence(sentence: str, role: str, keywords: Sequence[str] = ()) -> float:
    """How much `sentence` (said by `role`) is worth keeping; higher is more important."""
    stripped = sentence.strip()
    core = stripped.lower().strip(" .!?。！？~～,，")
    if core in _FILLERS:
        return 0.05
    cjk = _CJK.search(stripped) is not None
    score = 0.5
    score += 1.0 * min(3, _entity_count(stripped, cjk))
    score += 0.8 * min(3, len(_NUMBER.findall(stripped)))
    score += 1.5 * min(2, len(_DATE.findall(stripped)))
    score += 1.5 * min(2, len(_AMOUNT.findall(stripped)))
    lowered = stripped.lower()
    score += 2.0 * min(3, sum(1 for k in keywords if k and k.lower() in lowered))
    score += 1.5 if _DECISION.search(stripped) else 0.0
    score += 2.0 if _REMEMBER.search(stripped) else 0.0
    size = len(_CJK.findall(stripped)) / 1.5 + len(re.findall(r"[A-Za-z0-9]+", stripped))
    score += min(1.0, math.log1p(size) / math.log1p(20))
    if size < 3:
        score *= 0.3
    score *= _ROLE_WEIGHT.get(role, 0.8)
    if role == "assistant" and stripped.endswith(("?", "？")):
        score *= 0.7  # "Anything else I can help with?"
    return score


def _entity_count(sentence: str, cjk: bool) -> int:
    words = _CAPITALISED.findall(sentence)
    first = re.match(r"\W*([A-Za-z][a-zA-Z'’-]*)", sentence)
    if words and first and words[0] == first[1]:
        words = words[1:]  # a capital opening a sentence says nothing
    count = len({w for w in words if w not in _NOT_ENTITIES})
    if cjk:
        count += len(_CJK_ENTITY.findall(sentence)) + len(set(_LATIN_WORD.findall(sentence)))
    return count


@dataclass(frozen=True, slots=True)
class _Candidate:
    utterance: int
    order: int
    text: str
    score: float


def extractive_summary(utterances: Sequence[Utterance], tokenizer: Tokenizer,
                       target_tokens: int, *, keywords: Sequence[str] = (),
                       date_anchor: str | None = None) -> str:
    """The best sentences of `utterances` that fit `target_tokens`, verbatim, in order:
    one line per utterance that keeps any, "<Label>: s1 s2", the first line opened by
    "[<date_anchor>] " when given. If not even the best sentence fits whole, its head is kept
    with " …"."""
    candidates = [
        _Candidate(u, o, sentence, score_sentence(sentence, utterance.role, keywords))
        for u, utterance in enumerate(utterances)
        for o, sentence in enumerate(split_sentences(utterance.text))]
    ranked = sorted((c for c in candidates if c.score >= MIN_SCORE),
                    key=lambda c: (-c.score, c.utterance, c.order))
    chosen: list[_Candidate] = []
    for candidate in ranked:
        trial = sorted(chosen + [candidate], key=lambda c: (c.utterance, c.order))
        if tokenizer.count(_render(trial, utterances, date_anchor)) <= target_tokens:
            chosen = trial
    if chosen or not ranked:
        return _render(chosen, utterances, date_anchor) if chosen else ""
    return _cut_best(ranked[0], utterances, tokenizer, target_tokens, date_anchor)


def _cut_best(best: _Candidate, utterances: Sequence[Utterance], tokenizer: Tokenizer,
              target_tokens: int, date_anchor: str | None) -> str:
    frame = _render([_Candidate(best.utterance, 0, "", 0.0)], utterances, date_anchor)
    room = target_tokens - tokenizer.count(frame) - tokenizer.count(TRUNCATED) - 1
    head = tokenizer.truncate(best.text, room).rstrip() if room > 0 else ""
    if not head:
        return ""
    text = _render([_Candidate(best.utterance, 0, head + TRUNCATED, 0.0)], utterances,
                   date_anchor)
    return text if tokenizer.count(text) <= target_tokens else ""


def _render(chosen: Sequence[_Candidate], utterances: Sequence[Utterance],
            date_anchor: str | None) -> str:
    lines: list[str] = []
    current = -1
    for candidate in chosen:
        if candidate.utterance != current:
            current = candidate.utterance
            lines.append(utterances[current].prefix + candidate.text)
        else:
            lines[-1] = _join(lines[-1], candidate.text)
    if lines and date_anchor:
        lines[0] = f"[{date_anchor}] {lines[0]}"
    return "\n".join(lines)


def _join(left: str, right: str) -> str:
    if _CJK.search(left[-1:]) or _CJK.search(right[:1]) or left.endswith(("。", "！", "？")):
        return left + right
    return f"{left} {right}"


_LABELLED_LINE = re.compile(r"^([^\s:：]+(?: [^\s:：]+)?)[:：]\s*(.+)$")
_CJK_LABELS = {"用户": "user", "助手": "assistant"}


def utterances_from_summary(text: str) -> tuple[Utterance, ...]:
    """A summary's lines back as utterances, to summarise summaries again (merging chunks):
    a line "User: ..." keeps its label and weighs as the user's; other lines have no label."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        line = re.sub(r"^\[[^\]]{1,40}\]\s*", "", line)  # a date anchor; the merge adds its own
        match = _LABELLED_LINE.match(line)
        label = match[1].strip() if match else ""
        if label and (label in _CJK_LABELS or not _CJK.search(label)):
            role = _CJK_LABELS.get(label, label.lower())
            out.append(Utterance(role=role, text=match[2], label=label))
        else:
            out.append(Utterance(role="summary", text=line, label=""))
    return tuple(out)
