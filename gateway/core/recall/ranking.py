"""A learned re-ranking of recall's candidate turns: a linear score over signals the recaller
already has (the dense and lexical searches' scores and ranks, the fused score, the turn's
neighbours, its text). Its weights are trained offline (`python -m bench locomo-ranker`,
bench/locomo/ranker.py; the shipped ones in gateway/core/recall/ranker_weights.py) with a
pairwise loss: an evidence turn of a question should outscore the other candidates of that
question. (why: docs/decisions.md#recall_ranking--learned-gatewayconfigmemorypy)

Features (`FEATURES`), per candidate, all relative to this question's candidates:
similarity — the dense similarity of its own vector (the lowest dense hit's when it is not a
dense hit); dense_rank, lexical_rank — 20 / (20 + rank) in the dense ranking of turns (with
each hit's previous turn, `fusion.with_context`) and in its namespace's BM25 ranking, 0 when
absent; lexical — its BM25 score over the best of its ranking (0 when absent); next_similarity,
next_lexical, previous_similarity — the same signals of the turns after and before it (the
lowest dense hit's similarity, no BM25 score, when that turn is not a candidate); asks — it
holds a question mark; answers — the turn before it is a candidate that asks; speaker_named —
its speaker label (`Name: ` at the start of a line) is a name the question contains; place —
where it sits between the first and the last candidate;
fused — its fused score; similarity_gap — similarity minus the best dense hit's; named_day —
the day it was said on (its `[date] ` anchor, else the last date it writes:
`core.text.days.day_of`, read once per item, `Candidate.day`) is a day the question names
(`core.text.days.named_days`: "5月2日", "On May 2nd"; relative days such as 昨天 or "last
Saturday" from the latest day among the candidates), 0 for every candidate of a question that
names no day; own_words — the turn was said by the one whose words the question asks about
(`whose_words`): the assistant's for a question about what the assistant said ("What did you
recommend to me?": `need.asks_what_you_said`), else the user's for a question in the first
person ("my", "I", "我") — in an assistant chat most questions are about what the user said,
and the assistant's long replies on the same subject otherwise crowd out the user's short
statement.

Invariants: pure; deterministic (ties keep the order given); only turns are re-ranked — every
other item (a summary chunk) keeps its place in the given order, and the given scores stay
attached to places, so what follows the ranking (packing by rank) sees the same scale.
"""

from __future__ import annotations

import datetime
import math
import re
from dataclasses import dataclass
from operator import mul
from typing import Callable, Mapping, NamedTuple, Protocol, Sequence

from gateway.core.recall.fusion import asks
from gateway.core.recall.need import asks_what_you_said
from gateway.core.recall.recollection import Recollection
from gateway.core.recall.speakers import SPEAKER_LABEL, speaker_labels  # noqa: F401 — re-exported
from gateway.core.text.days import UNREAD, Unread, day_key, day_of, mentions_day, named_days

FEATURES = ("similarity", "dense_rank", "lexical", "lexical_rank", "next_similarity",
            "next_lexical", "asks", "answers", "speaker_named", "place", "fused",
            "similarity_gap", "previous_similarity", "named_day", "own_words")
ADDED = {"named_day": 0.0, "own_words": 0.0}
"""Features added after weights could be configured, with the weight a set of weights that
does not name them gets (0: such a set ranks as it did before the feature existed)."""
RANK_K = 20
"""The k of the rank features' 1 / (k + rank), as the fusion's."""
DEPTH = 120
"""Hits each search contributes when the ranking re-ranks them (a count per search).
(why: docs/decisions.md#depth--120-gatewaycorerecallrankingpy)"""
CANDIDATES = 300
"""The most fused candidates the ranking weighs, best first (a count; the ranking's cost is
per candidate). (why: docs/decisions.md#candidates--300-gatewaycorerecallrankingpy)"""

_LATIN = "A-Za-z0-9\u00c0-\u024f"
_FIRST_PERSON = re.compile(r"(?i:\b(?:i|me|my|mine|myself|i'm|i've|i'd)\b)|我")
_QUESTION_READ = 400
"""Whether a question is in the first person is read from its last this many characters, where
the question stands (a long message costs no more)."""


class Candidate(NamedTuple):
    """What the recaller knows of one candidate turn (None: not found by that search).
    Immutable; one is made per candidate per request (`gather`), so it is a tuple."""

    id: str
    text: str
    position: int
    fused: float
    similarity: float | None = None
    dense_rank: int | None = None
    """1-based, in the dense ranking of turns."""
    lexical: float | None = None
    """Its BM25 score divided by the best score of its (namespace's) ranking."""
    lexical_rank: int | None = None
    previous: str | None = None
    """The id of the turn before it, if any."""
    following: str | None = None
    """The id of the turn after it, if any."""
    is_turn: bool = True
    """False (a summary chunk): kept at its place, never re-ranked."""
    role: str | None = None
    """Who said it ("user", "assistant"), when known."""
    day: datetime.date | None | Unread = UNREAD
    """The day it was said on (`core.text.days.day_of` of its text; None: no day): given by
    `gather` from its item (derived once per stored item); UNREAD: derived from `text` when a
    question names a day."""
    speakers: tuple[str, ...] | Unread = UNREAD
    """Its speaker labels (`core.recall.speakers`): given by `gather` from its item (derived
    once per stored item); UNREAD: derived from `text` when ranked."""


class Neighbours(Protocol):
    """A turn's neighbours in its conversation (the recall entries' `Link`)."""

    @property
    def previous(self) -> str | None: ...
    @property
    def following(self) -> str | None: ...


def gather(fused: Sequence[tuple[str, float]], items: Mapping[str, Recollection],
           links: Mapping[str, Neighbours], similarity: Mapping[str, float],
           dense: Sequence[str], lexical: Sequence[Sequence[tuple[str, float]]]
           ) -> list[Candidate]:
    """The fused candidates that have an item, in fused order, as the ranking sees them.
    `links`: the turns' neighbours; `similarity`: the dense hits' similarities; `dense`: the
    dense ranking of turns (`fusion.with_context`); `lexical`: one BM25 ranking, (id, score)
    best first, per namespace searched — each score is divided by the best of its ranking."""
    dense_rank = {i: rank for rank, i in enumerate(dense, start=1)}.get
    words: dict[str, tuple[float, int]] = {}
    for hits in lexical:
        best = hits[0][1] if hits and hits[0][1] > 0 else 1.0
        words.update({i: (score / best, rank) for rank, (i, score) in enumerate(hits, 1)})
    out = []
    for i, score in fused:  # hot: once per fused candidate
        if (item := items.get(i)) is None:
            continue
        link = links.get(i)
        found = words.get(i)
        out.append(Candidate(
            i, item.text, item.position, score, similarity.get(i), dense_rank(i),
            found[0] if found else None, found[1] if found else None,
            link.previous if link else None, link.following if link else None,
            item.kind == "turn", item.role, item.day, item.speakers))
    return out


@dataclass(frozen=True, slots=True)
class Ranker:
    """A linear scoring: each feature (`FEATURES`, in that order) times its weight. Weights
    are given per unit of the raw feature (the training's standardisation folded in)."""

    weights: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.weights) != len(FEATURES):
            raise ValueError(f"a ranker needs {len(FEATURES)} weights, got "
                             f"{len(self.weights)}")
        if not all(math.isfinite(w) for w in self.weights):
            raise ValueError("ranker weights must be finite numbers")

    @classmethod
    def of(cls, weights: Mapping[str, float]) -> Ranker:
        """From weights by feature name; every feature must be named (those in `ADDED` may be
        left out), nothing else."""
        weights = {**ADDED, **weights}
        unknown = sorted(set(weights) - set(FEATURES))
        missing = [f for f in FEATURES if f not in weights]
        if unknown or missing:
            raise ValueError(f"ranker weights: unknown {unknown}, missing {missing}")
        return cls(tuple(float(weights[f]) for f in FEATURES))

    def to_dict(self) -> dict[str, float]:
        return dict(zip(FEATURES, self.weights))

    def rank(self, query: str, candidates: Sequence[Candidate],
             today: datetime.date | None = None) -> list[tuple[str, float]]:
        """The candidates' ids with scores, best first: turns ordered by this ranker, in the
        places turns held; every other item at its own place; the score of each place is the
        `fused` score of the item given there. `today`: as for `feature_rows`."""
        rows = feature_rows(query, candidates, today)
        weights = self.weights
        turns = [i for i, c in enumerate(candidates) if c.is_turn]
        scored = {i: sum(map(mul, weights, rows[i])) for i in turns}
        order = iter(sorted(turns, key=lambda i: -scored[i]))  # stable: ties keep order
        placed = [next(order) if c.is_turn else i for i, c in enumerate(candidates)]
        return [(candidates[i].id, candidates[slot].fused) for slot, i in enumerate(placed)]


def feature_rows(query: str, candidates: Sequence[Candidate],
                 today: datetime.date | None = None) -> list[tuple[float, ...]]:
    """`FEATURES` of each candidate, in order (see the module docstring); `today`: the day the
    query's relative days count from (None: the latest day a candidate was said on)."""
    similarity = {c.id: c.similarity for c in candidates if c.similarity is not None}
    lexical = {c.id: c.lexical for c in candidates if c.lexical is not None}
    asking = {c.id: asks(c.text) for c in candidates}
    floor = min(similarity.values(), default=0.0)
    best = max(similarity.values(), default=0.0)
    placed = [c.position for c in candidates if c.position >= 0]
    lo, hi = (min(placed), max(placed)) if placed else (0, 0)
    span = hi - lo
    named: dict[str, bool] = {}  # speaker label -> named in the query (few speakers)
    on_day = _on_named_day(query, candidates, today)
    whose = whose_words(query)
    sim, lex, ask = similarity.get, lexical.get, asking.get
    rows = []
    for (i, text, position, fused, _, dense_rank, _, lexical_rank, previous, following, _,
         role, _, speakers) in candidates:  # hot: once per candidate; .get(None): the default
        own = sim(i, floor)
        if speakers is UNREAD:
            speakers = speaker_labels(text)
        rows.append((
            own,
            RANK_K / (RANK_K + dense_rank) if dense_rank is not None else 0.0,
            lex(i, 0.0),
            RANK_K / (RANK_K + lexical_rank) if lexical_rank is not None else 0.0,
            sim(following, floor),
            lex(following, 0.0),
            1.0 if asking[i] else 0.0,
            1.0 if ask(previous, False) else 0.0,
            1.0 if speakers and _speaker_named(speakers, query, named) else 0.0,
            (position - lo) / span if span and position >= 0 else 0.0,
            fused,
            own - best,
            sim(previous, floor),
            on_day(i, 0.0),
            1.0 if whose is not None and role == whose else 0.0,
        ))
    return rows


def _on_named_day(query: str, candidates: Sequence[Candidate],
                  today: datetime.date | None = None) -> Callable[..., float | None]:
    """`.get` of {candidate id: 1.0} for the candidates said on a day `query` names (its
    relative days counted from `today`, else from the latest candidate's day); a question that
    names no day (most) costs one pattern scan. Each candidate's day is its `day` (the day the
    lexical index gives the turn): no candidate's text is read here."""
    if not mentions_day(query):
        return {}.get
    days = {c.id: day for c in candidates
            if isinstance(day := day_of(c.text) if c.day is UNREAD else c.day, datetime.date)}
    wanted = set(named_days(query, today or max(days.values(), default=None)))
    return {i: 1.0 for i, day in days.items() if day_key(day.month, day.day) in wanted}.get


def speaker_named(text: str, query: str) -> bool:
    """Whether one of `text`'s speaker labels is a name `query` contains (whole words in
    Latin script; Chinese and Japanese names border other characters)."""
    return _speaker_named(speaker_labels(text), query, {})


def _speaker_named(labels: tuple[str, ...], query: str, known: dict[str, bool]) -> bool:
    """`speaker_named` of a text with these `labels`, the answer per label memoised in `known`
    (for one query)."""
    for label in labels:
        answer = known.get(label)
        if answer is None:
            name = label.strip()
            answer = known[label] = bool(name) and name in query and re.search(
                rf"(?<![{_LATIN}]){re.escape(name)}(?![{_LATIN}])", query) is not None
        if answer:
            return True
    return False


def whose_words(query: str) -> str | None:
    """The role whose words `query` asks about: "assistant" when it asks what the assistant
    said (`need.asks_what_you_said`), else "user" when it is in the first person (read from its
    last `_QUESTION_READ` characters), else None (a question about someone named).
    (why: docs/decisions.md#own_words-follows-whose-words-the-question-asks-about-gatewaycorerecallrankingpy)"""
    if asks_what_you_said(query):
        return "assistant"
    return "user" if _FIRST_PERSON.search(query[-_QUESTION_READ:]) else None
