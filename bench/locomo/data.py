"""Loading a LoCoMo-schema file into typed, immutable conversations.

Schema: a list of `{sample_id, conversation: {speaker_a, speaker_b, session_<n>_date_time,
session_<n>: [{speaker, dia_id "D<n>:<k>", text, blip_caption?}]}, qa: [{question,
answer | adversarial_answer, evidence: ["D<n>:<k>"], category, question_type?,
question_date?}]}` (the last two: LongMemEval's, bench-data/REFERENCE.md).

Quirks handled here:
- sessions are the `session_<n>` keys that exist (some `session_<n>_date_time` keys have no
  session), in numeric order;
- evidence strings may hold several ids (`"D8:6; D9:17"`): split on `[;,\\s]+`; leading zeros
  are dropped (`D30:05` is `D30:5`); ids that resolve to no turn are skipped and counted;
- answers may be ints (`2022`): they are kept as text; category-5 questions may have no
  `answer` (only `adversarial_answer`).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_SESSION_KEY = re.compile(r"session_(\d+)")
_EVIDENCE_SPLIT = re.compile(r"[;,\s]+")
_DIA_ID = re.compile(r"D(\d+):(\d+)")


@dataclass(frozen=True, slots=True)
class Turn:
    dia_id: str
    """Canonical `D<session>:<k>` (no leading zeros)."""
    session: int
    speaker: str
    text: str
    caption: str | None = None
    role: str | None = None
    """"user" or "assistant" when set (a chain's turns, bench/locomo/script.py); None: by the
    conversation's speakers (`speaker_a` is the user)."""

    @property
    def line(self) -> str:
        """The turn as the client renders it (without the session-date marker)."""
        photo = f" [shares a photo: {self.caption}]" if self.caption else ""
        return f"{self.speaker}: {self.text}{photo}"

    @property
    def body(self) -> str:
        """The turn's own words (text and photo caption), without the speaker name."""
        return f"{self.text} {self.caption}" if self.caption else self.text


@dataclass(frozen=True, slots=True)
class Session:
    number: int
    date: str
    turns: tuple[Turn, ...]


@dataclass(frozen=True, slots=True)
class Question:
    index: int
    """Position in the conversation's `qa` list."""
    question: str
    answer: str | None
    """The gold answer as text (ints converted); None when the item has none (category 5)."""
    category: int
    evidence: tuple[str, ...]
    """Canonical ids of evidence turns that resolve, deduplicated, in order."""
    unresolved: int
    """Evidence references that did not resolve to a turn (skipped)."""
    question_type: str | None = None
    """LongMemEval's type (`temporal-reasoning`, `multi-session_abs`, ...); None elsewhere."""
    question_date: str | None = None
    """When the question is asked (LongMemEval: `2023/05/30 (Tue) 10:49`); None: after the
    history, undated."""

    @property
    def abstention(self) -> bool:
        """The answer was never said (LongMemEval's `_abs` types)."""
        return bool(self.question_type) and self.question_type.endswith("_abs")

    @property
    def asked(self) -> str:
        """The question as the client sends it: dated like a session's first message
        (`[<question_date>] <question>`, bench/locomo/script.py) when it has a date."""
        return f"[{self.question_date}] {self.question}" if self.question_date else \
            self.question


@dataclass(frozen=True, slots=True)
class Conversation:
    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]

    def turns(self) -> dict[str, Turn]:
        return {t.dia_id: t for s in self.sessions for t in s.turns}

    def session_dates(self) -> dict[int, str]:
        return {s.number: s.date for s in self.sessions}


def canonical_id(ref: str) -> str | None:
    """`D30:05` → `D30:5`; None if `ref` is not of the form D<n>:<k>."""
    match = _DIA_ID.fullmatch(ref.strip())
    if match is None:
        return None
    return f"D{int(match[1])}:{int(match[2])}"


def parse_evidence(refs: list[Any], known: set[str] | frozenset[str]
                   ) -> tuple[tuple[str, ...], int]:
    """(resolved canonical ids, deduplicated and in order; number of unresolved references)."""
    resolved: list[str] = []
    unresolved = 0
    for ref in refs:
        for part in _EVIDENCE_SPLIT.split(str(ref)):
            if not part:
                continue
            dia_id = canonical_id(part)
            if dia_id is None or dia_id not in known:
                unresolved += 1
            elif dia_id not in resolved:
                resolved.append(dia_id)
    return tuple(resolved), unresolved


def parse_conversation(item: dict[str, Any]) -> Conversation:
    raw = item["conversation"]
    numbers = sorted(int(m[1]) for key in raw if (m := _SESSION_KEY.fullmatch(key)))
    sessions = tuple(
        Session(number=n, date=str(raw.get(f"session_{n}_date_time", "")),
                turns=tuple(_turn(t, n) for t in raw[f"session_{n}"] or []))
        for n in numbers)
    known = frozenset(t.dia_id for s in sessions for t in s.turns)
    questions = []
    for i, qa in enumerate(item.get("qa") or []):
        evidence, unresolved = parse_evidence(list(qa.get("evidence") or []), known)
        answer = qa.get("answer")
        questions.append(Question(index=i, question=str(qa["question"]),
                                  answer=None if answer is None else str(answer),
                                  category=int(qa["category"]), evidence=evidence,
                                  unresolved=unresolved,
                                  question_type=_optional(qa.get("question_type")),
                                  question_date=_optional(qa.get("question_date"))))
    return Conversation(sample_id=str(item["sample_id"]), speaker_a=str(raw["speaker_a"]),
                        speaker_b=str(raw["speaker_b"]), sessions=sessions,
                        questions=tuple(questions))


def _optional(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def _turn(data: dict[str, Any], session: int) -> Turn:
    dia_id = canonical_id(str(data["dia_id"])) or str(data["dia_id"])
    caption = data.get("blip_caption")
    return Turn(dia_id=dia_id, session=session, speaker=str(data["speaker"]),
                text=str(data.get("text", "")), caption=str(caption) if caption else None)


def chain(conversations: list[Conversation], times: int = 1) -> Conversation:
    """The conversations one after another as one user's long history (`times` over), for the
    cost benchmark's long rows: sessions renumbered in order, every turn as its file has it
    (speaker and text), each marked with its role in its own conversation (its `speaker_a` is
    the user), and the questions of the last pass kept with their evidence renumbered to it
    (an earlier pass holds the same texts). The questions name the people their conversation
    names, so its speakers keep their names: a chain that renamed them to the first
    conversation's would ask about "Jon" in lines said by someone else."""
    first = conversations[0]
    sessions: list[Session] = []
    questions: list[Question] = []
    for n in range(times):
        for conversation in conversations:
            renumbered: dict[int, int] = {}
            for session in conversation.sessions:
                number = renumbered[session.number] = len(sessions) + 1
                sessions.append(Session(number=number, date=session.date, turns=tuple(
                    replace(t, dia_id=_moved(t.dia_id, number), session=number,
                            role=speaker_role(conversation, t))
                    for t in session.turns)))
            if n < times - 1:
                continue
            for q in conversation.questions:
                moved = tuple(_moved(e, renumbered[int(e[1:].split(":")[0])])
                              for e in q.evidence)
                questions.append(replace(q, index=len(questions), evidence=moved))
    return Conversation(sample_id=f"chain{times}-" + "+".join(c.sample_id for c in conversations),
                        speaker_a=first.speaker_a, speaker_b=first.speaker_b,
                        sessions=tuple(sessions), questions=tuple(questions))


def speaker_role(conversation: Conversation, turn: Turn) -> str:
    """Who says `turn` in the chat the client replays: its own role if set, else "user" for
    the conversation's `speaker_a` and "assistant" for anyone else."""
    if turn.role is not None:
        return turn.role
    return "user" if turn.speaker == conversation.speaker_a else "assistant"


def _moved(dia_id: str, session: int) -> str:
    """`D<old>:<k>` as turn k of session `session`."""
    return f"D{session}:{dia_id.split(':', 1)[1]}"


def load(path: Path | str) -> list[Conversation]:
    with open(path, encoding="utf-8") as f:
        return [parse_conversation(item) for item in json.load(f)]


def file_sha256(path: Path | str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()
