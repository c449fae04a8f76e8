"""Long-term facts about a user, and the policy that keeps them: upsert, dedupe, cap, decay.

A fact is a key/value pair (`user_location: 北京`) with a type ("fact", "preference", ...),
an importance and a confidence in [0, 1], the stored message ids it stems from, timestamps
(seconds since the epoch, always passed in: nothing here reads a clock) and the history of
values it replaced.

Invariants:
- one fact per key; the newest value wins and the one it replaces goes to `history`;
- replaying an update (every source id already seen by the fact) changes nothing, so the
  memory worker may process the same messages twice;
- `cap` keeps at most `max_facts` non-preference facts and `max_preferences` preferences,
  dropping the lowest retention score;
- a fact's weight halves every `half_life_days` since its last update; `age_out` drops facts
  whose weight fell below a threshold.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Mapping, Sequence

FACT_TYPES = ("fact", "preference", "event", "relationship")
MAX_HISTORY = 10
MAX_KEY_LENGTH = 64
MAX_VALUE_LENGTH = 300
DAY_SECONDS = 86_400.0


@dataclass(frozen=True, slots=True)
class FactVersion:
    """A value a fact held before it was replaced."""

    value: str
    updated_at: float
    source_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Fact:
    key: str
    value: str
    type: str = "fact"
    importance: float = 0.5
    confidence: float = 0.5
    source_ids: tuple[str, ...] = ()
    created_at: float = 0.0
    updated_at: float = 0.0
    history: tuple[FactVersion, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.key or not self.value:
            raise ValueError("a fact needs a key and a value")
        if self.type not in FACT_TYPES:
            raise ValueError(f"unknown fact type {self.type!r}")
        for name in ("importance", "confidence"):
            number = getattr(self, name)
            if not (isinstance(number, (int, float)) and 0.0 <= number <= 1.0):
                raise ValueError(f"{name} must be within [0, 1], not {number!r}")
        object.__setattr__(self, "source_ids", tuple(self.source_ids))
        object.__setattr__(self, "history", tuple(self.history))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (the store's encoding)."""
        return {"key": self.key, "value": self.value, "type": self.type,
                "importance": self.importance, "confidence": self.confidence,
                "source_ids": list(self.source_ids), "created_at": self.created_at,
                "updated_at": self.updated_at,
                "history": [{"value": h.value, "updated_at": h.updated_at,
                             "source_ids": list(h.source_ids)} for h in self.history]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Fact:
        """The inverse of `to_dict`; raises ValueError/KeyError/TypeError on a bad shape."""
        return cls(key=str(data["key"]), value=str(data["value"]), type=str(data["type"]),
                   importance=float(data["importance"]), confidence=float(data["confidence"]),
                   source_ids=tuple(str(s) for s in data.get("source_ids") or ()),
                   created_at=float(data.get("created_at") or 0.0),
                   updated_at=float(data.get("updated_at") or 0.0),
                   history=tuple(FactVersion(str(h["value"]), float(h["updated_at"]),
                                             tuple(str(s) for s in h.get("source_ids") or ()))
                                 for h in data.get("history") or ()))

    @property
    def seen_source_ids(self) -> frozenset[str]:
        """Every message id that ever contributed to this fact, current value or history."""
        return frozenset(self.source_ids).union(*(h.source_ids for h in self.history))


@dataclass(frozen=True, slots=True)
class FactPolicy:
    max_facts: int = 100
    max_preferences: int = 50
    half_life_days: float = 30.0
    drop_below: float = 0.02
    """Facts whose decayed weight falls below this are dropped by `age_out`."""


def normalize_key(text: str) -> str:
    """A snake_case key: lower case, runs of anything but letters and digits as one `_`."""
    key = re.sub(r"[\W_]+", "_", text.strip().lower()).strip("_")
    return key[:MAX_KEY_LENGTH].rstrip("_")


def clean_value(text: str) -> str:
    """A value on one line, spaces collapsed, cut to MAX_VALUE_LENGTH characters."""
    return " ".join(text.split())[:MAX_VALUE_LENGTH].strip()


def _same_value(a: str, b: str) -> bool:
    return " ".join(a.split()).casefold() == " ".join(b.split()).casefold()


def _merged_ids(first: Iterable[str], second: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*first, *second)))


def upsert(facts: Sequence[Fact], new: Fact, now: float) -> tuple[Fact, ...]:
    """`facts` with `new` applied by key (the order of `facts` is kept, a new key goes last).

    - unknown key: `new` is added, created and updated `now`;
    - a replay (all of `new.source_ids` already seen by the fact): nothing changes;
    - the same value: `updated_at` becomes `now`, confidence and importance the higher of
      both, source ids merged; history unchanged;
    - another value: `new` wins, the old value goes to the end of `history` (at most
      MAX_HISTORY kept), `created_at` stays.
    """
    index = next((i for i, f in enumerate(facts) if f.key == new.key), None)
    if index is None:
        return (*facts, replace(new, created_at=now, updated_at=now, history=()))
    old = facts[index]
    if new.source_ids and set(new.source_ids) <= old.seen_source_ids:
        return tuple(facts)
    if _same_value(old.value, new.value):
        merged = replace(old, updated_at=now, confidence=max(old.confidence, new.confidence),
                         importance=max(old.importance, new.importance), type=new.type,
                         source_ids=_merged_ids(old.source_ids, new.source_ids))
    else:
        previous = FactVersion(old.value, old.updated_at, old.source_ids)
        merged = replace(new, created_at=old.created_at, updated_at=now,
                         history=(*old.history, previous)[-MAX_HISTORY:])
    return (*facts[:index], merged, *facts[index + 1:])


def dedupe_key(facts: Sequence[Fact], new: Fact, similarity: Mapping[str, float] |
               Callable[[Fact, Fact], float], threshold: float,
               protected: frozenset[str] = frozenset()) -> Fact:
    """`new`, renamed to the key of the existing fact it duplicates, if any.

    A fact duplicates `new` when it has the same type and a similarity >= `threshold`
    (`similarity` maps existing keys to precomputed similarities, or computes one).
    `new` keeps its key when that key exists already, when it is a like or dislike (its key
    is made from its value), or when both keys are in `protected`
    (a vocabulary of keys that mean different things however alike their texts look:
    `contract_date: 2023-03-01` is no duplicate of `payment_date: 2023-03-01`).
    """
    if any(f.key == new.key for f in facts) or new.key.startswith(("prefers_", "dislikes_")):
        # (A like's key is made from its value, core/memory/extraction.py: renamed to a
        # similar like's key, it would name another thing than it holds.)
        return new
    best: tuple[float, str] | None = None
    for fact in facts:
        if fact.type != new.type or (fact.key in protected and new.key in protected):
            continue
        score = (similarity.get(fact.key, 0.0) if isinstance(similarity, Mapping)
                 else similarity(fact, new))
        if score >= threshold and (best is None or score > best[0]):
            best = (score, fact.key)
    return new if best is None else replace(new, key=best[1])


def forget_sources(fact: Fact, gone: frozenset[str]) -> Fact | None:
    """The fact as if the messages `gone` (a deleted conversation's) had never been sent.

    Their ids leave the fact's sources and its history; a past value only they stated leaves
    the history; when the current value was stated only by them, the fact is forgotten (None)
    — the user's statement is what a fact rests on, and the one it rested on is deleted. A
    value with no recorded source at all is kept: nothing says it came from those messages."""
    if not gone or gone.isdisjoint(fact.seen_source_ids):
        return fact
    if fact.source_ids and set(fact.source_ids) <= gone:
        return None
    history = tuple(replace(h, source_ids=tuple(i for i in h.source_ids if i not in gone))
                    for h in fact.history if not (h.source_ids and set(h.source_ids) <= gone))
    return replace(fact, source_ids=tuple(i for i in fact.source_ids if i not in gone),
                   history=history)


def decayed_weight(fact: Fact, now: float, half_life_days: float = 30.0) -> float:
    """importance × 0.5^(age / half-life), age counted from the last update (never negative)."""
    age_days = max(0.0, now - fact.updated_at) / DAY_SECONDS
    return fact.importance * math.pow(0.5, age_days / half_life_days)


def retention_score(fact: Fact, now: float, half_life_days: float = 30.0) -> float:
    """What `cap` keeps the highest of: decayed weight, discounted by low confidence."""
    return decayed_weight(fact, now, half_life_days) * (0.5 + 0.5 * fact.confidence)


def age_out(facts: Sequence[Fact], now: float, half_life_days: float = 30.0,
            drop_below: float = 0.02) -> tuple[Fact, ...]:
    """The facts whose decayed weight is still >= `drop_below`, in their order."""
    return tuple(f for f in facts if decayed_weight(f, now, half_life_days) >= drop_below)


def cap(facts: Sequence[Fact], now: float, max_facts: int = 100, max_preferences: int = 50,
        half_life_days: float = 30.0) -> tuple[Fact, ...]:
    """At most `max_preferences` preferences and `max_facts` other facts, in their order;
    the lowest retention scores go first (ties: the least recently updated, then by key)."""
    def kept(group: list[Fact], limit: int) -> set[str]:
        ranked = sorted(group, key=lambda f: (-retention_score(f, now, half_life_days),
                                              -f.updated_at, f.key))
        return {f.key for f in ranked[:max(0, limit)]}

    keep = kept([f for f in facts if f.type == "preference"], max_preferences)
    keep |= kept([f for f in facts if f.type != "preference"], max_facts)
    return tuple(f for f in facts if f.key in keep)


def apply_policy(facts: Sequence[Fact], now: float, policy: FactPolicy) -> tuple[Fact, ...]:
    """`age_out` then `cap`, with the policy's numbers."""
    alive = age_out(facts, now, policy.half_life_days, policy.drop_below)
    return cap(alive, now, policy.max_facts, policy.max_preferences, policy.half_life_days)


def fact_text(fact: Fact) -> str:
    """The text a fact is embedded as: `user location: 北京`."""
    return f"{fact.key.replace('_', ' ')}: {fact.value}"


def render_fact(fact: Fact) -> str:
    """What the model sees of a fact: its text and the date it was last stated (UTC)."""
    day = datetime.fromtimestamp(fact.updated_at, tz=timezone.utc).strftime("%Y-%m-%d")
    return f"{fact_text(fact)} (as of {day})"
