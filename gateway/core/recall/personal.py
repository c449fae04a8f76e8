"""Whether a message asks about the past of the people in the conversation, from its grammar.

A question about the user's own life ("What is the name of the playlist I created?", "How many
appointments did I go to in March?") or about a person's past ("What did Caroline research?")
is answered by what was said before, though it names no day and says no "remember". A general
request ("How do I boil an egg?", "Can I freeze rice?", "Who wrote Hamlet?") is not, whatever
its person: the present tense, a modal or a conditional asks for knowledge, not memory.

The rules, as a grammar book would state them, read question sentences only (ending in "?",
or opening with a question word or an auxiliary; Chinese: ending in "？", or holding a question
word or 吗) — a statement about one's past ("I tried pip, what should I do?") is background
to a present request:
- English, a past auxiliary with a first-person or second-person subject: "did I", "have we",
  "was I", "did my sister", "did you" (but "did you know", a general question);
- English, in a clause that is itself the question (it opens with a question word or an
  auxiliary): a first- or second-person subject and a verb in the past ("the playlist I
  created", "the hotel we've stayed at", "the trail you recommended"), not after a modal, a
  present auxiliary or "if" ("Am I allowed", "what if I mixed" are not the past), nor after
  "have" ("Have you heard of ...?" asks what the assistant knows); and "what is my ...",
  "what brand are my ...", a fact about the user;
- English, anywhere: "I once <past>", "you once <past>", and a first- or second-person past
  verb in a clause that "before" closes as an adverb ("I recommended a film before, what was
  it?"; not "I've never cooked lamb before": no experience is no event);
- English, a person's name in a past question: after "did", "has" or "had" and before a verb
  ("What did Caroline research?", "How long has Melanie had ..."), after "was"/"were" and not
  before a participle ("When was Jon in Rome?", "What was Tom's first car?", but "When was
  Lincoln born?" is a passive), or as the subject of a past verb after a lower-case word ("the
  race that Mia won"). One capitalised word, not a run of them ("When did World War II end?"
  is not taken); "Why did Rome fall?" is — words alone cannot tell a friend's name from a
  historical one;
- Chinese, conservatively: 我/我们 with 曾 (曾经), or with a verb and the experiential 过
  before a question word, 吗, an object or the end ("我看过什么电影？"), or with a verb and
  了 right before a question word ("我买了什么？") — not 过 as a verb ("我明天过生日").

A first-person past in a relative clause of a present request ("Can I reheat the rice I
cooked?") is taken too: grammar alone cannot tell it from "Which rice did I cook?".

Invariants: pure; case-insensitive but for names (capitalised as written); reads what it is
given only (the caller passes the message's tail, so the time is bounded).
"""

from __future__ import annotations

import re

from gateway.core.recall.fusion import asks

_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'"})
_SENTENCE = re.compile(r"[^.!?。！？\n]+[.!?。！？]*")
_CLAUSE = re.compile(r"[^,;:，；：]+")
_OPENERS = ("what", "when", "where", "who", "whom", "whose", "which", "why", "how", "did",
            "do", "does", "have", "has", "had", "was", "were", "is", "are", "can", "could",
            "would", "should", "will", "tell")
_OPENER = re.compile(rf"^\W*(?:{'|'.join(_OPENERS)})\b")

_IRREGULAR = (
    "ate|awoke|began|bent|bit|bled|blew|bought|broke|brought|built|burnt|caught|chose|"
    "came|cost|dealt|did|drew|drank|drove|dug|fed|fell|felt|fought|found|fled|flew|forgot|"
    "forgave|froze|gave|got|gotten|grew|had|heard|held|hid|hung|hurt|kept|knew|laid|led|left|"
    "lent|lit|lost|made|meant|met|paid|quit|ran|rang|rode|rose|said|sang|sat|saw|sent|shook|"
    "shot|showed|shown|slept|sold|spent|spoke|spun|stole|stood|stuck|struck|swam|swore|"
    "taught|thought|threw|told|took|tore|understood|went|woke|won|wore|wrote|been|seen|done|"
    "gone|eaten|given|taken|written|known|spoken|chosen|driven|ridden|begun|drunk|sung|swum|"
    "born|broken|forgotten|frozen|hidden|stolen|worn|grown|flown|thrown|read")
# Words in -ed that are no past tense.
_NOT_PAST = ("need|feed|seed|speed|bleed|breed|heed|weed|proceed|succeed|exceed|embed|shed|"
             "bed|wed|red")
_PAST_VERB = rf"(?:(?!(?:{_NOT_PAST})\b)[a-z]{{2,}}ed|{_IRREGULAR})"
_ADVERB = r"(?:(?:never|ever|first|last|once|already|just|recently|actually|also|originally|" \
          r"previously|initially|finally|really|all|both)\s+)?"
_AUXILIARY = re.compile(
    r"\b(?:did|didn't|have|haven't|had|hadn't|was|wasn't|were|weren't)\s+(?:i|we)\b"
    r"|\bdid(?:n't)?\s+(?:my|our)\b|\bdid(?:n't)?\s+you\s+(?!know\b)[a-z]")
_SUBJECT_PAST = re.compile(
    rf"(?<![\w'])(?P<before>\w+\s+)?(?:i|we|you)(?:'ve|\s+have|\s+had)?\s+{_ADVERB}"
    rf"(?P<verb>{_PAST_VERB})\b")
# Before a subject, these make its verb form no past: a modal, a present auxiliary, "if"; or
# make it a question of experience ("Have you heard of ...?"; "have I", "did I": `_AUXILIARY`).
_NOT_BEFORE = {"am", "are", "is", "do", "does", "can", "could", "should", "would", "will",
               "shall", "may", "might", "must", "if", "let", "have", "has", "had", "did"}
_MY = re.compile(r"^\W*(?:(?:who|when)|(?:what|which)(?:\s+[a-z]+){0,2})"
                 r"(?:'s|\s+is|\s+are|\s+was|\s+were)\s+(?:the\s+\w+\s+of\s+)?my\b")
_ANYWHERE = re.compile(rf"\b(?:i|we|you)\s+(?:once\s+{_PAST_VERB}\b"
                       rf"|{_PAST_VERB}\b(?=[^,.?!;]*\bbefore\s*(?:[,.?!;]|$)))")
_NAME = r"(?!I\b)[A-Z][a-z]+(?:'s)?"
_NAMED = re.compile(
    rf"\b(?:[Dd]id|[Hh]as|[Hh]ad)\s+{_NAME}\s+[a-z]"
    rf"|\b[Ww](?:as|ere)\s+{_NAME}\s+(?!{_PAST_VERB}\b)[a-z]")
# A name as the subject of a past verb; the word before it, lower-case, is no auxiliary (a
# passive: "was Lincoln born") and no capitalised word (a run of them is no person's name).
_NAMED_SUBJECT = re.compile(
    rf"(?<!\S)(?P<before>\S+)\s+{_NAME}\s+(?:has\s+|had\s+)?{_PAST_VERB}\b")
_PASSIVE = {"was", "were", "is", "are", "be", "been"}

_ZH_QUESTION = re.compile(r"[？?]\s*$|吗|什么|哪|谁|几|多少|为什么|怎么|有没有|是不是")
_ZH_ASK = r"(?:什么|哪|谁|几|多少)"
_ZH_PAST = re.compile(
    r"我们?曾"
    rf"|我们?[^\s，。！？,.!?过]{{1,6}}?过(?:{_ZH_ASK}|吗|的|一|这|那|[？?]|$)"
    rf"|我们?[^\s，。！？,.!?了]{{1,4}}?了{_ZH_ASK}")


def asks_own_past(text: str) -> bool:
    """Whether `text` holds a question about the past of the people in the conversation (see
    the module docstring)."""
    text = text.translate(_APOSTROPHES)
    if _ANYWHERE.search(text.lower()):
        return True
    return any(_question_about_past(s.strip()) for s in _SENTENCE.findall(text))


def _question_about_past(sentence: str) -> bool:
    lower = sentence.lower()
    if _ZH_QUESTION.search(sentence) and _ZH_PAST.search(sentence):
        return True
    if not (sentence.endswith("?") or _OPENER.match(lower)):
        return False
    if _AUXILIARY.search(lower) or _NAMED.search(sentence) or any(
            m["before"][:1].islower() and m["before"].strip(",") not in _PASSIVE
            for m in _NAMED_SUBJECT.finditer(sentence)):
        return True
    return any(_clause_about_past(c) for c in _CLAUSE.findall(lower))


def _clause_about_past(clause: str) -> bool:
    """A clause that is itself the question, about the speaker's past or a fact about them."""
    if not _OPENER.match(clause):
        return False
    if _MY.match(clause):
        return True
    for m in _SUBJECT_PAST.finditer(clause):
        before = (m.group("before") or "").strip()
        if before not in _NOT_BEFORE:
            return True
    return False


_CAPITALISED = re.compile(r"(?<![\w'])(?!I\b)[A-Z][\w-]*[a-z][\w-]*")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;\"(]\s*|\n)\s*$")
_NAMES_READ = 1000
"""How much of a message's end `asked_names` reads: a question is short; a pasted document is
not read through."""


def asked_names(text: str) -> frozenset[str]:
    """The names a question says: its capitalised words that do not open a sentence (nor
    "I"), without a possessive "'s" — "What are Joanna's hobbies?" asks about Joanna. None
    when `text` asks nothing (no question mark: `fusion.asks`); a name that opens a sentence
    is not told from any other first word; a script without capitals says none. Reads the
    last `_NAMES_READ` characters."""
    text = text[-_NAMES_READ:]
    if not asks(text):
        return frozenset()
    return frozenset(m.group() for m in _CAPITALISED.finditer(text)
                     if not _SENTENCE_START.search(text, 0, m.start()))
