"""The cost benchmark's data sets, built from the LoCoMo-schema files of the bench data folder.
Every replayed request waits for memory to catch up before the next is sent (`settle`,
bench/locomo/replay.py), as a person's pauses between turns would let it.

- `locomo-dev`: the LoCoMo dev split (4 conversations, 16–31k tokens each), one user each,
  replayed `stateless` (the client resends its whole history);
- `memorybank-en`: MemoryBank's English assistant chats (short days of a user and an
  assistant), `stateless`;
- `long-100k`, `long-300k`: the LoCoMo dev conversations chained into one user's history once
  (~90k tokens) and three times over (~250k), `stateful` (the client sends only its new
  message: the forwarded prompts are the same, the replay cheaper), probed with the last
  pass's questions (bench/locomo/data.py `chain`);
- `user-5-conversations`: each LoCoMo dev conversation's first six sessions, each replayed as
  a conversation of its own by one user (`sessions`); what is billed is the sixth
  conversation's requests, the user then having five earlier ones. Its questions are those
  whose evidence lies in those six sessions, each asked in a new conversation of the user —
  so only memory across conversations can bring the evidence;
- `user-5-continued`: the same requests billed, the questions asked instead as the sixth
  conversation's next message (`continued`): the evidence in its own session is in the history
  the gateway forwards whole, the rest only memory from outside it (the tail after the history,
  `context.outside_share`) can bring — what that tail is worth, beside what it costs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from bench.locomo.data import Conversation, Question, Session, chain, load

DATA_NAMES = ("locomo-dev", "memorybank-en", "long-100k", "long-300k", "user-5-conversations",
              "user-5-continued")
DEFAULT_DATA = ("locomo-dev", "memorybank-en", "long-100k", "user-5-conversations",
                "user-5-continued")
"""`long-300k` is left to be asked for: its replay alone takes about an hour on two cores."""
EARLIER_CONVERSATIONS = 5


@dataclass(frozen=True, slots=True)
class DataSet:
    name: str
    conversations: tuple[Conversation, ...]
    mode: str
    """The harness's client mode (bench/locomo/replay.py)."""
    file: Path
    held_out: bool
    """Its conversations keep their file's sample ids, so the learned ranking can be trained
    without each (a chain is one conversation: the shipped weights)."""
    billed_session: int | None = None
    """In the `sessions` and `continued` modes, the one session (1-based) whose requests are
    billed (`continued`: the one the questions are asked in)."""
    kept_questions: dict[str, tuple[int, ...]] | None = None
    """Per conversation, the file's index of each question kept (None: all, in order)."""

    def file_index(self, sample_id: str, index: int) -> int:
        """A question's index in the data file (its `qa` list)."""
        return index if self.kept_questions is None else self.kept_questions[sample_id][index]


def build(name: str, folder: Path) -> DataSet:
    locomo = folder / "locomo-dev.json"
    if name == "locomo-dev":
        return DataSet(name, tuple(load(locomo)), "stateless", locomo, held_out=True)
    if name == "memorybank-en":
        path = folder / "memorybank-en-dev.json"
        return DataSet(name, tuple(load(path)), "stateless", path, held_out=True)
    if name in ("long-100k", "long-300k"):
        times = 1 if name == "long-100k" else 3
        return DataSet(name, (chain(load(locomo), times),), "stateful", locomo, held_out=False)
    if name in ("user-5-conversations", "user-5-continued"):
        sessions = EARLIER_CONVERSATIONS + 1
        full = load(locomo)
        mode = "sessions" if name == "user-5-conversations" else "continued"
        return DataSet(name, tuple(first_sessions(c, sessions) for c in full), mode,
                       locomo, held_out=True, billed_session=sessions,
                       kept_questions={c.sample_id: tuple(q.index for q in _kept(c, sessions))
                                       for c in full})
    raise ValueError(f"unknown data {name!r}; choose from {', '.join(DATA_NAMES)}")


def first_sessions(conversation: Conversation, count: int) -> Conversation:
    """`conversation` cut to its first `count` sessions with turns, with the questions whose
    every evidence turn lies in them (renumbered: a question's index is its place)."""
    return replace(conversation, sessions=_sessions(conversation, count), questions=tuple(
        replace(q, index=k) for k, q in enumerate(_kept(conversation, count))))


def _sessions(conversation: Conversation, count: int) -> tuple[Session, ...]:
    return tuple(s for s in conversation.sessions if s.turns)[:count]


def _kept(conversation: Conversation, count: int) -> list[Question]:
    numbers = {s.number for s in _sessions(conversation, count)}
    return [q for q in conversation.questions
            if q.evidence and all(_session(e) in numbers for e in q.evidence)]


def _session(dia_id: str) -> int:
    return int(dia_id[1:].split(":", 1)[0])


def parse_names(text: str) -> Sequence[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if bad := [n for n in names if n not in DATA_NAMES]:
        raise ValueError(f"unknown data {', '.join(bad)}; choose from {', '.join(DATA_NAMES)}")
    return names
