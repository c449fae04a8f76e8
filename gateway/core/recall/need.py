"""Whether a message needs memory at all, from its words alone.

Why: relevance (relevance.py) says how similar stored turns are to a message, not whether the
message is about anything stored. Greetings, thanks and farewells are most similar to a chat's
own greetings, thanks and farewells (USE scores "Good morning! How are you today?" up to 0.68
against them, above many real questions' best items), so the floor and the gate forward a
block of old pleasantries for "Thanks, that's all for now!". And a question about the
conversation itself ("What did we talk about in our first conversation?") is similar to no
stored turn in particular (its best scores 0.19), so the gate drops the recall it asks for.

Three answers (`Need`):
- `NONE`: the message is social formulas only — greetings, how-are-you, thanks, farewells,
  acknowledgements — in English or Chinese (a name may be added: "Thanks, Bob!"). Nothing is
  recalled for it; the recent turns the model needs to answer it are forwarded anyway.
- `PAST`: it refers to what was said before ("remember", "last time", "we talked about",
  "上次", "还记得", "我们聊过") or names a day ("On April 27th", "5月4号", "yesterday", "上周六":
  a question about what happened then, which a stored turn of that day answers while being
  little like it — the date carries the question, and a sentence encoder hardly sees dates),
  or asks about the past of the people in the conversation by its grammar ("What is the name
  of the playlist I created?", "What did Caroline research?", "我去过哪些城市？":
  gateway/core/recall/personal.py). Recalled items skip the gate; the floor still applies.
  A date the message opens with is a session marker (gateway/core/text/dates.py), not a day
  it asks about: the message is read without it.
- `OPEN`: anything else: the floor and the gate as configured.

Beside the need, `asks_what_you_said`: whether the message asks about the assistant's own
words, so a long reply recalled for it keeps its rank (gateway/core/recall/pages.py).

Rules, not a classifier: the formulas of each language as a phrase book would list them, not
the benchmark's probes (bench/locomo/null_probes.py); what they keep and drop: bench/README.md
("Messages that need no memory"). A general question ("How long should I boil an egg?") is
`OPEN`: present tense, a modal or a conditional asks for knowledge, not memory.

Invariants: pure; case-insensitive (but "May", a month only when capitalised); a message with
any word left beyond the formulas (but one name), or longer than `_PLEASANTRIES_AT_MOST`
characters, is not `NONE`; an empty message is `OPEN` (nothing to decide on); `PAST` wins over
`NONE`; the time taken is bounded, whatever the message's length.
"""

from __future__ import annotations

import datetime
import enum
import re

from gateway.core.recall.personal import asks_own_past
from gateway.core.text.dates import after_opening_date, find_dates
from gateway.core.text.days import named_days


class Need(enum.Enum):
    NONE = "none"
    PAST = "past"
    OPEN = "open"


def _alternatives(phrases: str) -> str:
    """A regex alternation of the `|`-separated phrases, longest first (so "thank you so much"
    is taken whole, not as "thank you" and a rest)."""
    return "|".join(sorted((p.strip() for p in phrases.split("|") if p.strip()),
                           key=len, reverse=True))


_EN_FORMULAS = _alternatives(
    # greetings and how-are-you
    "hi|hello|hey|hiya|howdy|greetings|good morning|good afternoon|good evening|good day|"
    "morning|evening|how are you|how are you doing|how are you today|how are you doing today|"
    "how's it going|how is it going|how have you been|how've you been|how are things|"
    "how's your day|how is your day|how's your day going|what's up|whats up|"
    "nice to meet you|nice to see you|good to see you|great to see you|good to hear from you|"
    "long time no see|and you|"
    # thanks
    "thanks|thank you|thx|many thanks|thanks a lot|thanks so much|thanks very much|"
    "thank you so much|thank you very much|thanks again|thank you again|much appreciated|"
    "appreciate it|i appreciate it|cheers|you're welcome|my pleasure|no problem|no worries|"
    # closings
    "that's all|that is all|that's all for now|that's all for today|that's it|"
    "that's it for now|bye|goodbye|bye bye|see you|see ya|see you later|see you soon|"
    "see you tomorrow|talk to you later|talk later|take care|good night|gotta go|"
    "have a nice day|have a good day|have a great day|have a good night|have a nice weekend|"
    "have a good weekend|have a good one|"
    # acknowledgements and small replies
    "ok|okay|sure|great|cool|nice|awesome|perfect|wonderful|got it|sounds good|alright|"
    "all right|yes|yeah|yep|no|nope|i see|makes sense|understood|will do|haha|hahaha|lol|wow|"
    "oh|ah|hmm|me too|you too|same to you|i'm fine|i'm good|i'm great|i'm well|i'm ok|"
    "i am fine|i am good|i am well|not bad|pretty good|all good|fine|good|great thanks")
_EN = re.compile(rf"(?<![\w'])(?:{_EN_FORMULAS})(?![\w'])")

_ZH_FORMULAS = _alternatives(
    "你好|您好|大家好|嗨|哈喽|早上好|早安|上午好|中午好|下午好|晚上好|晚安|"
    "你好吗|您好吗|你怎么样|你今天怎么样|你今天好吗|最近怎么样|最近好吗|"
    "谢谢|谢谢你|谢谢您|多谢|感谢|非常感谢|太感谢了|谢啦|"
    "暂时就这些|就这些|就这样|没别的了|"
    "再见|拜拜|明天见|回头见|下次见|保重|"
    "好的|好吧|好|行|嗯|嗯嗯|哦|啊|明白|明白了|知道了|懂了|没问题|不客气|哈哈|哈哈哈|太好了|"
    "我很好|我挺好|还不错|不错|你呢")
_ZH = re.compile(_ZH_FORMULAS)
# Sentence-final particles left over once the formulas are taken out ("谢谢啦" → "啦").
_ZH_PARTICLES = re.compile("[了呢吧呀啦哟嘛的]")
# Longer than this is more than pleasantries (and not worth scanning for them: a long message
# would cost milliseconds). A reference to the past is looked for in the message's last
# `_PAST_READ` characters only, where its question stands: a long message costs no more.
_PLEASANTRIES_AT_MOST = 160
_PAST_READ = 400
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'"})
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")

_PAST = re.compile(
    r"\b(?:remember|remind me|recall|last time|earlier|"
    r"as i said|as you said|we (?:talked|spoke|chatted|discussed)|"
    r"(?:i|we|you) (?:mentioned|said)|(?:i|you) told (?:you|me)|i asked you|you asked me|"
    r"did (?:i|we|you) (?:tell|mention|say|talk|discuss|share|ask)|"
    r"(?:our|the|that) (?:first|last|previous|earlier|other) "
    r"(?:conversation|chat|talk|session|discussion)s?|"
    r"yesterday|last (?:night|week|weekend|month|year|monday|tuesday|wednesday|thursday|"
    r"friday|saturday|sunday))\b"
    r"|记得|记不记得|上次|上回|之前|以前|那天|我们聊|我们谈|我们讨论|我说过|你说过|我提到|"
    r"我提过|我跟你说|我告诉过你|我们第一次|昨天|昨日|前天|上周|上星期|上礼拜|上个月|去年")


_TIME_OF_DAY = re.compile(r"\d{1,2}[:：]\d{2}")


def search_text(message: str) -> str:
    """What recall searches and ranks for `message` (the current user message's text): the
    message without the date it opens with when that date is set off as a session marker — in
    brackets ("[2023/05/30 (Tue) 19:58] …") or with a time of day ("1:56 pm on 8 May, 2023:
    …") — a client's stamp of when it asks, not what about. A bare date the message opens with
    ("2024年3月2日我去了哪里？") may be the day it asks about: it stays."""
    return asked(message)[1]


def asked(message: str) -> tuple[datetime.date | None, str]:
    """(the day `message` says it is asked on, `search_text` of it), its marker read once. The
    day is the date of the session marker `search_text` leaves out (None: it has none) —
    "today" for the relative days the message names ("yesterday", "last Saturday")."""
    rest = after_opening_date(message)
    marker = message[:len(message) - len(rest)]
    if rest == message or not (marker.lstrip().startswith("[") or _TIME_OF_DAY.search(marker)):
        return None, message
    dates = find_dates(marker)
    return (dates[0].date, rest) if dates else (None, message)


def memory_need(message: str) -> Need:
    """What `message` (the current user message's text) asks of memory (see the module
    docstring). A date it opens with is a session marker (dates.py), not its subject: read
    without it (a dated "Thanks!" needs no memory)."""
    message = after_opening_date(message)
    tail = message[-_PAST_READ:]
    text = tail.translate(_APOSTROPHES).lower()
    if _PAST.search(text) or named_days(tail) or asks_own_past(tail):
        return Need.PAST
    if len(message) > _PLEASANTRIES_AT_MOST:
        return Need.OPEN
    rest = _ZH_PARTICLES.sub("", _ZH.sub(" ", _EN.sub(" ", text)))
    said = _EN.search(text) or _ZH.search(text)
    left = _WORD.findall(rest)
    if said and (not left or (len(left) == 1 and _named(message, left[0]))):
        return Need.NONE
    return Need.OPEN


def _named(message: str, word: str) -> bool:
    """Whether the one word left is a name: capitalised where the message says it (Latin
    script; a Chinese name cannot be told from other words by its form)."""
    return any(w[:1].isupper() and w.lower() == word
               for w in _WORD.findall(message.translate(_APOSTROPHES)))


# What the assistant said or made before: second person and a verb of saying or giving in the
# past ("you (once) recommended", "did you give", "have you told"), "your answer", "remind me"
# followed by no first person ("remind me what I said" asks about the user's words), or their
# Chinese forms with 你 as the subject (not 和你 / 给你…, where it is the object)
# (gateway/core/recall/pages.py, and the ranking's `own_words`).
_SAID = (r"mentioned|suggested|recommended|told|said|gave|given|listed|created|wrote|written|"
         r"provided|shared|named|described|explained|proposed|showed|shown|offered|advised|"
         r"taught|compiled|noted|came up with|put together|made|pointed out|brought up|"
         r"talked about")
_SAY = (r"mention|suggest|recommend|tell|say|give|list|create|write|provide|share|name|"
        r"describe|explain|propose|show|offer|advise|teach|compile|note|come up with|"
        r"put together|make|point out|bring up|talk about")
_THEN = r"(?: (?:once|ever|also|previously|just|already|recently|earlier|first|originally))?"
_YOU_SAID = re.compile(
    rf"\byou(?: had| have|'d|'ve)?{_THEN} (?:{_SAID})\b"
    rf"|\b(?:did|have|had) you{_THEN} (?:{_SAY}|{_SAID})\b"
    r"|\byour (?:previous |earlier |last |first )?"
    r"(?:answer|reply|response|suggestion|recommendation|list|advice)s?\b"
    r"|\bremind me\b(?!.*\b(?:i|me|my|mine|i'm|i've|i'd|we|our|us)\b)"
    r"|(?<![和向跟对给帮与为替])[你您](?:之前|上次|刚才|以前|曾经|曾|也)?(?:[和跟对向为给]我)?"
    r"(?:说|提到|提过|提起|推荐|建议|告诉|讲|列|写|介绍|分享|教|给[了过]?我)")


def asks_what_you_said(message: str) -> bool:
    """Whether `message` asks about what the assistant said or made before (read where
    `memory_need` reads a reference to the past: the message's last `_PAST_READ` characters)."""
    return bool(_YOU_SAID.search(message[-_PAST_READ:].translate(_APOSTROPHES).lower()))
