"""One recall's steps from search hits to recollections, on plain data: what the request
path (`gateway.memory.recall.recaller.Recaller.recall`) and the offline simulation
(`bench/locomo/simulate.py`) both run.

Three steps, each pure, with the recaller's reads of stored entries between them:
1. `fused_order`: the dense hits as a ranking of turns (`fusion.with_context`) and the fused
   ranking of the dense and lexical rankings (`fusion.fuse`), capped at
   `ranking.CANDIDATES` when a learned ranking follows. The caller then reads the candidates
   it has no entry of yet (turns before dense hits).
2. `best`: the candidates re-ordered by the learned ranking (`ranking.Ranker`, when given),
   the current topic's items boosted (`core.memory.topics`), the best `top_k`, and the turn
   after each of them that brings its successor (`Best.following`). The caller then reads
   the entries of those it has not read.
3. `recollections`: the best with their successors placed after them
   (`fusion.with_successors`; a successor longer than `SUCCESSOR_MAX_CHARS` is not brought
   along), each item re-made with its score and its relevance (`relevance.relevances`).
What is forwarded of them is `relevance.above_floor`'s choice.

Invariants: pure; deterministic; an id appears once; only ids with an item in `items` are
ranked or returned (an unread turn before a dense hit may be fused, then is dropped unless
read).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Callable, Collection, Literal, Mapping, Sequence

from gateway.core.memory.topics import boost_same_topic, same_topic
from gateway.core.recall.fusion import (RECENCY_WEIGHT, RRF_K, asks, fuse, with_context,
                                        with_successors)
from gateway.core.recall.ranking import CANDIDATES, Candidate, Neighbours, Ranker, gather
from gateway.core.recall.recollection import Recollection
from gateway.core.recall.relevance import relevances

Hit = tuple[str, float]
SuccessorsOf = Literal["questions", "all"]

SUCCESSOR_MAX_CHARS = 1600
"""A turn brings the turn after it only when that turn is at most this long (characters): a
short answer is its question's cheap context; a long reply (an assistant's page on the subject)
costs as much as several recalled turns and is ranked on its own merit instead.
(why: docs/decisions.md#successor_max_chars--1600-gatewaycorerecallassemblypy)"""


@dataclass(frozen=True, slots=True)
class Fused:
    """The fused candidates of one recall and what the ranking weighs of the dense search."""

    order: list[Hit]
    """Ids with fused scores, best first (at most `ranking.CANDIDATES` when ranked)."""
    dense: list[str]
    """The dense ranking of turns (`fusion.with_context` of the hits, unless off)."""
    similarity: dict[str, float]
    """The dense hits' similarities by id."""
    lexical: tuple[Sequence[Hit], ...]
    """Each lexical search's hits, (id, score) best first."""


@dataclass(frozen=True, slots=True)
class Best:
    """The best candidates of one recall, and the turn to follow each that brings one."""

    ranked: list[Hit]
    following: dict[str, str]


def fused_order(dense: Sequence[Hit], lexical: Sequence[Sequence[Hit]],
                items: Mapping[str, Recollection], previous: Mapping[str, str], *,
                read: Collection[str] | None = None,
                excluded: Collection[str] = frozenset(), ranked: bool = False,
                rrf_k: int = RRF_K, recency_weight: float = RECENCY_WEIGHT,
                context: bool = True, lexical_weight: float = 1.0,
                rescore: Callable[[list[Hit]], list[Hit]] | None = None) -> Fused:
    """The fused candidates. `dense`: the dense hits of every namespace searched (id,
    similarity; one embedder, one scale), merged by similarity; `lexical`: each namespace's
    lexical hits, best first; `items`: the candidates' usable items by id, whose positions
    weigh recency; `previous`: the turn before each turn, where known; `read`: the ids whose
    entries were read, usable or not (default: those of `items`) — a turn before a dense hit
    that was not read stays in the dense ranking unless `excluded`; `ranked`: a learned
    ranking follows (the order is capped at `ranking.CANDIDATES`); `context`: false, the dense
    hits rank only themselves; `lexical_weight`: each lexical ranking's weight in the fusion
    (the dense one's is 1); `rescore`: an experiment's change to the fused order, made before
    the cap (None: none)."""
    read = items.keys() if read is None else read
    hits = sorted(dense, key=lambda hit: -hit[1])
    ids = [i for i, _ in hits]
    ranked_dense = [i for i in (with_context(ids, previous) if context else ids)
                    if i in items or (i not in read and i not in excluded)]
    order = fuse([ranked_dense, *([i for i, _ in found if i in items] for found in lexical)],
                 {i: item.position for i, item in items.items()}, k=rrf_k,
                 recency_weight=recency_weight,
                 weights=None if lexical_weight == 1.0
                 else (1.0, *[lexical_weight] * len(lexical)))
    if rescore is not None:
        order = rescore(order)
    return Fused(order[:CANDIDATES] if ranked else order, ranked_dense, dict(hits),
                 tuple(lexical))


def candidates(fused: Fused, items: Mapping[str, Recollection],
               links: Mapping[str, Neighbours]) -> list[Candidate]:
    """The fused candidates with an item in `items`, in fused order, as the learned ranking
    weighs them (`ranking.gather`)."""
    return gather(fused.order, items, links, fused.similarity, fused.dense, fused.lexical)


def best(query: str, fused: Fused, items: Mapping[str, Recollection],
         links: Mapping[str, Neighbours], *, top_k: int, ranker: Ranker | None = None,
         successors: bool = True, successors_of: SuccessorsOf = "questions",
         topic_positions: Mapping[str, int] | None = None, topic_start: int | None = None,
         topic_boost: float = 0.0, today: datetime.date | None = None) -> Best:
    """The best `top_k` of `fused`: re-ordered by `ranker` when given (over the candidates
    with an item in `items`), the items of the current topic (`topic_positions`: the
    conversation's own items' places; from `topic_start` on) scored `topic_boost` higher; and,
    when `successors`, the turn after each (`links`) of every one (`successors_of="all"`) or of
    those that ask something (`fusion.asks`). `today`: the day the query's relative days
    count from (`ranking.feature_rows`)."""
    order = fused.order
    if ranker is not None:
        order = ranker.rank(query, candidates(fused, items, links), today)
    if topic_start is not None and topic_boost != 0:
        order = boost_same_topic(order, same_topic(topic_positions or {}, topic_start),
                                 topic_boost)
    order = order[:top_k]
    following = {i: after for i, _ in order
                 if successors and (link := links.get(i)) is not None
                 and (after := link.following) is not None
                 and (successors_of == "all" or (i in items and asks(items[i].text)))}
    return Best(order, following)


def recollections(chosen: Best, items: Mapping[str, Recollection],
                  similarity: Mapping[str, float],
                  adjacent: Sequence[tuple[str, str]]) -> list[Recollection]:
    """The best, each followed by its successor when that is at most `SUCCESSOR_MAX_CHARS`
    long, those with an item in `items`, each re-made with its score and its relevance (None:
    no dense hit, unknown). `similarity`: the dense hits' similarities; `adjacent`:
    consecutive turns (earlier, later)."""
    following = {i: after for i, after in chosen.following.items()
                 if after in items and len(items[after].text) <= SUCCESSOR_MAX_CHARS}
    out = [(i, score) for i, score in with_successors(chosen.ranked, following)
           if i in items]
    relevance = relevances([i for i, _ in out], similarity, adjacent)
    return [items[i].changed(score=score, relevance=relevance.get(i)) for i, score in out]


def adjacent(links: Mapping[str, Neighbours]) -> list[tuple[str, str]]:
    """Consecutive turns (earlier, later) that `links` name."""
    pairs = [(p, i) for i, link in links.items() if (p := link.previous) is not None]
    return pairs + [(i, f) for i, link in links.items() if (f := link.following) is not None]
