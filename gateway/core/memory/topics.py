"""Topic state of a conversation: its segments, when one ends, what each is called.

A conversation is cut into topic segments: contiguous spans of its active branch, oldest
first, each starting at a user message (position 0 for the first). The memory worker
(gateway/memory/jobs/topic_tracker.py) walks the new user messages and asks, for each, whether it
leaves the current topic — by embedding drift (`is_switch`: the message is less similar than
the embedder's threshold to every one of the last turns of the segment) or, when configured,
an LLM classifier — then keeps the segments here and labels them from their salient words.

Invariants (tests/unit/test_topics.py):
- segments are ordered, never overlap and leave no gap: segment k+1 starts right after
  segment k ends; the last one (the current topic) has no end;
- a segment holds at least `min_turns` user turns before a switch may end it (one off-topic
  aside does not make a topic);
- a segment is on the active branch only while the transcript holds its start id at its start
  position (ids chain their parents, so that vouches for everything before it): a fork drops
  the segments after it, and the walk resumes from there;
- labels come from redacted text only (the worker redacts before calling `topic_label`);
- recall's boost (`boost_same_topic`) multiplies scores, so a zero boost changes nothing.

Everything here is pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from typing import AbstractSet, Iterable, Literal, Mapping, Sequence

from gateway.core.text.lexical import CHINESE_FUNCTION_CHARS, tokens

SwitchMethod = Literal["start", "embedding", "llm"]
LABEL_MAX_CHARS = 64


@dataclass(frozen=True, slots=True)
class TopicSegment:
    """One topic of a conversation: transcript positions `start..end` (inclusive)."""

    index: int
    """0 for the conversation's first topic, then 1, 2, ... (stable while on the branch)."""
    label: str
    """A few salient words of the segment ("" while it has none)."""
    start: int
    start_id: str
    """The stored id of the message at `start` (a user message, or the first message)."""
    end: int | None = None
    """The last position of the segment; None for the current (open) one."""
    method: SwitchMethod = "start"
    """What started it: the conversation's start, embedding drift, or the LLM classifier."""
    turns: int = 0
    """User turns in it so far."""

    @property
    def current(self) -> bool:
        return self.end is None

    def to_json(self) -> dict[str, object]:
        return {"index": self.index, "label": self.label, "start": self.start,
                "start_id": self.start_id, "end": self.end, "method": self.method,
                "turns": self.turns}

    @staticmethod
    def from_json(data: Mapping[str, object]) -> TopicSegment:
        """The segment, or ValueError for data that is not one."""
        try:
            method = data.get("method", "start")
            if method not in ("start", "embedding", "llm"):
                raise ValueError(f"unknown method {method!r}")
            end = data.get("end")
            return TopicSegment(index=int(data["index"]),  # type: ignore[call-overload]
                                label=str(data.get("label") or ""),
                                start=int(data["start"]),  # type: ignore[call-overload]
                                start_id=str(data["start_id"]),
                                end=None if end is None else int(end),  # type: ignore
                                method=method,  # type: ignore[arg-type]
                                turns=int(data.get("turns") or 0))  # type: ignore
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a topic segment: {exc!r}") from exc


@dataclass(frozen=True, slots=True)
class TopicPolicy:
    """How topics are tracked (per tenant; `memory.topics` in the config maps onto this)."""

    window_turns: int = 3
    """A new user message is compared with this many of the segment's latest turns (user and
    assistant messages, newest first)."""
    min_turns: int = 2
    """A segment holds at least this many user turns before a switch can end it."""
    label_words: int = 3
    """Salient words in a label."""
    max_segments: int = 100
    """History kept: beyond it, the oldest segments are forgotten (their turns stay)."""

    def __post_init__(self) -> None:
        for name in ("window_turns", "min_turns", "label_words", "max_segments"):
            if getattr(self, name) < 1:
                raise ValueError(f"TopicPolicy.{name} must be at least 1")


def is_switch(similarities: Sequence[float], threshold: float) -> bool:
    """Embedding drift: the new message leaves the topic when it is less similar than
    `threshold` to every one of the window's turns. No window: no switch."""
    return bool(similarities) and max(similarities) < threshold


def on_branch(segments: Sequence[TopicSegment],
              transcript_ids: Sequence[str]) -> tuple[TopicSegment, ...]:
    """The longest prefix of `segments` still on the active branch, its last one reopened (a
    fork inside or after it may have moved its end)."""
    kept: list[TopicSegment] = []
    for segment in segments:
        if segment.start >= len(transcript_ids) or transcript_ids[segment.start] != segment.start_id:
            break
        kept.append(segment)
    if kept and kept[-1].end is not None:
        kept[-1] = replace(kept[-1], end=None)
    return tuple(kept)


def started(first_id: str) -> tuple[TopicSegment, ...]:
    """The segments of a conversation that just began: one open topic from position 0."""
    return (TopicSegment(index=0, label="", start=0, start_id=first_id),)


def may_switch(segments: Sequence[TopicSegment], policy: TopicPolicy) -> bool:
    """Whether the current segment is long enough to end."""
    return bool(segments) and segments[-1].turns >= policy.min_turns


def switched(segments: Sequence[TopicSegment], position: int, message_id: str,
             method: SwitchMethod, policy: TopicPolicy) -> tuple[TopicSegment, ...]:
    """The segments after the user message at `position` opened a new topic: the current
    one ends just before it, a new one starts at it (with that turn counted). The oldest are
    forgotten beyond `policy.max_segments`."""
    if not segments or position <= segments[-1].start:
        raise ValueError("a new topic starts after the current one")
    closed = replace(segments[-1], end=position - 1)
    opened = TopicSegment(index=closed.index + 1, label="", start=position,
                          start_id=message_id, method=method, turns=1)
    return (*segments[:-1], closed, opened)[-policy.max_segments:]


def counted_turn(segments: Sequence[TopicSegment]) -> tuple[TopicSegment, ...]:
    """The segments after one more user turn stayed on the current topic."""
    return (*segments[:-1], replace(segments[-1], turns=segments[-1].turns + 1))


def labelled(segments: Sequence[TopicSegment], index: int,
             label: str) -> tuple[TopicSegment, ...]:
    """The segments with segment `index` (a position in `segments`) called `label`."""
    return tuple(replace(s, label=label) if i == index else s for i, s in enumerate(segments))


def topic_label(texts: Iterable[str], words: int = 3, *,
                background: Iterable[str] = ()) -> str:
    """A label of a few salient words for a topic's (redacted) messages, in any script.

    Words are the lexical tokeniser's (gateway/core/text/lexical.py: function words dropped, CJK
    as characters and bigrams), less chat filler ("thanks", "really", "好的"). A word scores
    by how many of the topic's messages use it, weighted by how rare it is among the
    `background` messages (the rest of the conversation: a name or a word said all along is
    not what this topic is about); without a background, by use alone. Ties go to the more
    frequent word, then to the word seen first. Digits-only and one-letter words are no topic;
    a single CJK character is used only when no bigram is left; a CJK bigram overlapping one
    already chosen ("京天" beside "北京" in "北京天气") is skipped. Words are joined with
    spaces, CJK ones with "、"."""
    return label_of_tokens([tokens(t) for t in texts if t.strip()], words,
                           background=[frozenset(tokens(t)) for t in background if t.strip()])


def label_of_tokens(messages: Sequence[Sequence[str]], words: int = 3, *,
                    background: Sequence[AbstractSet[str]] = ()) -> str:
    """`topic_label` of messages already tokenised (`gateway.core.text.lexical.tokens` of each
    non-blank text; the background's as sets): what a caller that keeps tokens per message
    labels with, without tokenising them again."""
    others = background
    spread: Counter[str] = Counter()
    often: Counter[str] = Counter()
    first: dict[str, int] = {}
    for m in messages:
        spread.update(set(m))
        often.update(m)
        for token in m:
            first.setdefault(token, len(first))
    elsewhere = Counter(t for m in others for t in m if t in spread)

    def score(token: str) -> tuple[float, int, int]:
        # log(1) = 0 for a word in every background message; the floor keeps use counting.
        rarity = math.log((1 + len(others)) / (1 + elsewhere[token])) + 0.1
        return (-spread[token] * rarity, -often[token], first[token])

    candidates = [t for t in first if _worth_labelling(t)]
    if any(_cjk(t) and len(t) == 2 for t in candidates):  # characters are vague beside bigrams
        candidates = [t for t in candidates if not (_cjk(t) and len(t) == 1)]
    candidates.sort(key=score)
    chosen: list[str] = []
    for token in candidates:
        if len(chosen) == words:
            break
        if _cjk(token) and any(_overlaps(token, c) for c in chosen if _cjk(c)):
            continue
        chosen.append(token)
    label = ""
    for token in chosen:
        separator = "" if not label else ("、" if _cjk(token) or _cjk(label[-1]) else " ")
        label += separator + token
    return label[:LABEL_MAX_CHARS]


def same_topic(positions: Mapping[str, int], topic_start: int | None) -> frozenset[str]:
    """The ids among `positions` (item id -> its place in the current conversation) that
    belong to the current topic: placed at or after its start."""
    if topic_start is None:
        return frozenset()
    return frozenset(i for i, p in positions.items() if p >= topic_start)


def boost_same_topic(ranked: Sequence[tuple[str, float]], same: frozenset[str],
                     boost: float) -> list[tuple[str, float]]:
    """`ranked` (id, score; best first) with the scores of `same` items multiplied by
    `1 + boost`, best first again (stable: equal scores keep their order)."""
    if boost == 0 or not same:
        return list(ranked)
    boosted = [(i, s * (1.0 + boost) if i in same else s) for i, s in ranked]
    return sorted(boosted, key=lambda pair: -pair[1])


CHAT_FILLER = frozenset(
    "about also am anything back bit can could day did doing done don even feel get getting glad "
    "go going good got great guess haha hello hey hi hope just know let like lol lot love "
    "made make maybe much need next nice no not now oh ok okay one out pretty re really right "
    "say see should so something sounds still sure thank thanks thing things think time too "
    "up very want way well what wow yeah yes yet ll ve".split()
    + "谢谢 好的 真的 非常 一下 现在 还是 因为 所以 但是 如果 已经 应该 可能 比较 感觉 今天 然后".split())
"""Words of talk, not of a topic (beside lexical.py's function words): never a label."""


def _worth_labelling(token: str) -> bool:
    if token.isdigit() or token in CHAT_FILLER:
        return False
    if _cjk(token):  # "我想" or "的天" is grammar, not a topic
        return not any(c in CHINESE_FUNCTION_CHARS for c in token)
    return len(token) > 1


def _cjk(token: str) -> bool:
    return any("\u3040" <= c <= "\u30ff" or "\u3400" <= c <= "\u9fff" or "\uf900" <= c <= "\ufaff"
               for c in token)


def _overlaps(a: str, b: str) -> bool:
    """Whether CJK bigrams `a` and `b` read as one run ("京天" and "北京")."""
    return a[0] == b[-1] or a[-1] == b[0]
