"""The importance rule: which user messages the memory worker pins by itself.

Cheap and conservative on purpose — a pin is shown on every later request of the conversation,
so a false positive costs tokens for good, while a miss only leaves the message to recall as
before. A user message is important when it

- asks to be remembered: "remember that…", "please remember:…", "don't forget that…", "note
  that…" (a bare "note" only before what it keeps: "Note: …", "Note the rules: …"), "keep in
  mind…", "for future reference…", "记住…", "请记得…", "别忘了…", "不要忘记…" — at the start
  of a sentence, and not as a question, a shared memory ("remember when we…", "do you
  remember…", "你还记得…吗") or a reminder to do something ("don't forget to…", which in
  conversations between people is advice);
- sets a standing rule for the assistant: "from now on…", "always/never answer|reply|use|…",
  "don't ever…", "never give … advice", "从现在开始…", "以后请…", "永远不要…", "请始终…";
- states an identifier: a code mixing capitals and at least three digits ("HT-2023-118",
  "INV00042", "AB-12345"; not inside a web address), or a number of four or more digits right
  after a word that names an identifier ("order number is 88120931", "合同编号：2023118").

The rule reads the message after PII redaction (gateway/core/text/pii.py): phone, card and ID
numbers are never a reason to pin (and a pin made by the rule stores the redacted text).

What a pin by the rule holds is `important_part`: the sentences that made the message important
(the request to remember, the rule, the sentence naming the identifier), in their order, not the
rest of the message — a pasted document or a long request that says "remember" once is not
shown whole on every later request. A sentence ends at ". ", "! ", "? " (or the text's end), at
"。", "！", "？" and at a line break; a sentence that ends with a colon takes what it introduces:
the list items on the lines right after it (lines opening with "-", "*", "•", "1." or "a)":
"Remember these:" and its items), else the next sentence (a line "Remember:" and the line
after it) — when the trigger is in the colon's sentence; a trigger inside the list a heading
introduces (a report's "Evaluation:" and its items, one saying "Note that …") takes its own
sentence only.

Dates alone are not a reason either: everyday messages often mention one ("on 7 May",
"yesterday", "in 2022") and recall already dates every turn — pinning them would fill the
block with small talk. The rule is pinned down by tables of examples in
tests/unit/test_importance.py; why it is this conservative: docs/decisions.md, "The importance
rule pins little"; why a pin holds sentences: "A rule pin holds the sentences that made it
important".
"""

from __future__ import annotations

import re
from typing import Literal

Reason = Literal["remember", "rule", "identifier"]

# A sentence starts at the text's start or after . ! ? ; : newline (ASCII or CJK).
_START = r"(?:^|(?<=[.!?;:\n。！？；：]))\s*"
_SOFTENER = r"(?:(?:please|pls|and|also|oh|ok|okay|so|but|hey|btw|just)[\s,]+)*"

_REMEMBER = re.compile(
    _START + _SOFTENER
    + r"(?:remember|don'?t\s+forget|do\s+not\s+forget|never\s+forget|make\s+a\s+note"
      r"|keep\s+in\s+mind|for\s+future\s+reference"
      # "note" that keeps something ("note that…", "note, …", "note the rules: …"), not an
      # instruction for the answer ("Note any festivals on the island.").
      r"|note(?=\s*(?:that|down|my|this|these)\b|\s*,|[^.!?\n]*:))\b"
    # What follows says what to keep — not a shared memory ("remember when we", "the time").
    # ("to …" is a reminder or advice to do something, not something to keep.)
    r"(?!\s+(?:to\b|when|how|what|where|who|why|if|whether|the\s+time|that\s+time|those|back"
    r"|me\b|us\b|him\b|her\b|them\b|it\?))",
    re.IGNORECASE)
_REMEMBER_ZH = re.compile(r"(?<![还你您])(?:请记住|记住|请记得|请你记得|别忘了|不要忘记|不要忘了|请注意)")
_QUESTION_ZH = re.compile(r"[吗嘛么]\s*[？?]?\s*$|[？?]\s*$")

_RULE = re.compile(
    _START + _SOFTENER
    + r"(?:from\s+now\s+on\b"
      r"|(?:always|never|don'?t\s+ever|do\s+not\s+ever|don'?t|do\s+not)\s+"
      r"(?:answer|reply|respond|write|use|speak|talk\s+to\s+me|call\s+me|address\s+me"
      r"|mention|include|recommend|suggest|format|translate|cite|sign"
      r"|give\s+(?:me\s+)?(?:\w+\s+)?advice))\b",
    re.IGNORECASE)
_RULE_ZH = re.compile(r"从现在开始|从现在起|今后请|以后请|以后都要|以后都用|以后一律|永远不要|请始终|请总是|请一律")

# Capitals then digits, as a whole word: an identifier when it has a separator and three
# digits or more ("HT-2023-118"), or five digits or more without one ("INV00042"); product
# and flight names ("RTX3080", "MH370", "COVID-19") stay out.
_CODE = re.compile(r"(?<![\w-])[A-Z]{2,6}[-_/]?\d[A-Z0-9]*(?:[-_/][A-Z0-9]+)*(?![\w-])")
_URL = re.compile(r"(?:\b[a-z][a-z0-9+.-]*://|\bwww\.)\S+", re.IGNORECASE)
_NAMED_NUMBER = re.compile(
    r"\b(?:number|no\.|id|code|reference|ref|order|account|ticket|invoice|contract|policy"
    r"|booking|confirmation|tracking|case|serial|membership)\b[^.\n]{0,20}?"
    r"(?:is|was|:|#)\s*#?\s*\d{4,}\b"
    r"|(?:编号|单号|订单号|合同号|账号|工单号|编码|代码|号码)\s*(?:是|为|:|：)?\s*[A-Za-z]*\d{4,}",
    re.IGNORECASE)


def importance(redacted: str) -> Reason | None:
    """Why a user message is worth pinning (None: it is not); `redacted`: its text after
    PII redaction."""
    text = redacted.strip()
    if not text:
        return None
    if _asks_to_remember(text):
        return "remember"
    if _RULE.search(text) or _RULE_ZH.search(text):
        return "rule"
    if _codes(text) or _NAMED_NUMBER.search(text):
        return "identifier"
    return None


def important_part(redacted: str) -> str | None:
    """The sentences of `redacted` that make it important (`importance`), in order, joined
    by a space; the whole text (stripped) when every sentence does; None when none does."""
    text = redacted.strip()
    hits = _trigger_starts(text)  # empty exactly when `importance` is None
    if not hits:
        return None
    spans = _sentences(text, hits)
    chosen = [(start, end) for start, end in spans
              if any(start <= hit < end for hit in hits)]
    if not chosen or chosen == spans:
        return text
    return " ".join(text[start:end].strip() for start, end in chosen)


def _sentences(text: str, hits: list[int]) -> list[tuple[int, int]]:
    """(start, end) of each non-blank sentence of `text` (see the module docstring), a sentence
    that ends with a colon together with what it introduces — unless a trigger (`hits`) lies
    in what it introduces but not in it: then each of those is a sentence of its own."""
    spans: list[tuple[int, int]] = []
    for start, head, end in _colon_sentences(text):
        if head < end and not any(start <= hit < head for hit in hits) \
                and any(head <= hit < end for hit in hits):
            spans.append((start, head))
            spans.extend(_plain_sentences(text, head, end))
        else:
            spans.append((start, end))
    return [(start, end) for start, end in spans if text[start:end].strip()]


_SENTENCE_END = re.compile(r"[.!?](?=\s)|[。！？]|\n")
_LIST_ITEMS = re.compile(r"(?:[ \t]*(?:[-*•]|\d{1,3}[.)]|[A-Za-z][.)])[ \t]+[^\n]*(?:\n|$))+")


def _colon_sentences(text: str) -> list[tuple[int, int, int]]:
    """(start, head, end) of each sentence of `text`: `head` where the sentence itself ends,
    `end` after what it introduces when it ends with a colon (its list items, else the next
    sentence), else `head`."""
    spans: list[tuple[int, int, int]] = []
    start = 0
    while start < len(text):
        end = head = _sentence_end(text, start)
        if text[start:end].rstrip().endswith((":", "：")):
            items = _LIST_ITEMS.match(text, end)
            if items:
                end = items.end()
            elif text[end:].strip():  # what the colon introduces: the next sentence
                end = _sentence_end(text, end + len(text[end:]) - len(text[end:].lstrip()))
        spans.append((start, head, end))
        start = end
    return spans


def _plain_sentences(text: str, start: int, stop: int) -> list[tuple[int, int]]:
    """(start, end) of the sentences from `start` to `stop`, none joined to another."""
    spans = []
    while start < stop:
        end = min(_sentence_end(text, start), stop)
        spans.append((start, end))
        start = end
    return spans


def _sentence_end(text: str, start: int) -> int:
    found = _SENTENCE_END.search(text, start)
    return found.end() if found else len(text)


def _trigger_starts(text: str) -> list[int]:
    """Where each thing that makes `text` important starts: a request to remember (not a
    question), a standing rule, an identifier."""
    starts = _remember_starts(text)
    starts += [m.start() for pattern in (_RULE, _RULE_ZH, _NAMED_NUMBER)
               for m in pattern.finditer(text)]
    starts += _codes(text)
    # A match that opens with the blanks after a boundary starts at its first word.
    return [start + len(text[start:]) - len(text[start:].lstrip()) for start in starts]


def _sentence_at(text: str, start: int, end: str) -> str:
    """`text` from `start` to the first boundary `end` (a lookbehind) after it."""
    return re.split(end, text[start:], maxsplit=1)[0]


def _codes(text: str) -> list[int]:
    """Where each identifier code of `text` starts, leaving out those inside a web address
    (a path's "TR03125" is not something the user asks to keep)."""
    links = [m.span() for m in _URL.finditer(text)]
    return [m.start() for m in _CODE.finditer(text) if _is_code(m.group())
            and not any(start <= m.start() < end for start, end in links)]


def _is_code(word: str) -> bool:
    digits = sum(c.isdigit() for c in word)
    return digits >= 3 if any(c in "-_/" for c in word) else digits >= 5


def _asks_to_remember(text: str) -> bool:
    return bool(_remember_starts(text))


def _remember_starts(text: str) -> list[int]:
    """Where each request to remember starts (one asked as a question is none)."""
    return [m.start() for m in _REMEMBER.finditer(text)
            if not _sentence_at(text, m.start(), r"(?<=[.!?\n])").rstrip().endswith("?")] + \
        [m.start() for m in _REMEMBER_ZH.finditer(text)
         if not _QUESTION_ZH.search(_sentence_at(text, m.start(), r"(?<=[。！？!?\n])"))]
