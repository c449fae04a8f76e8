"""Fusing ranked lists (dense similarity, BM25) into one ranking, with a mild recency weight.

Reciprocal-rank fusion (Cormack et al., 2009): an item's score is the sum over the lists that
contain it of 1 / (k + rank), rank counted from 1. Only ranks matter, so a cosine and a BM25
score never need to be put on one scale, and an item found by both searches beats one found
by only one of them. A smaller k gives the top ranks of each list more weight.

Recency: the fused score is multiplied by 1 + recency_weight * r, where r in [0, 1] is the
item's place between the oldest (0) and the newest (1) positioned candidate; between two
otherwise equal scores the newer item comes first.

Invariants: pure; deterministic (ties broken by newer position, then id); an id appears once;
items without a position (-1, e.g. facts) get no recency boost.
"""

from __future__ import annotations

from typing import Mapping, Sequence

RRF_K = 20
"""The default k of reciprocal-rank fusion: the offset added to each rank (a count of ranks).
(why: docs/decisions.md#rrf_k--20-gatewaycorerecallfusionpy)"""
RECENCY_WEIGHT = 0.01
"""The default recency weight, a fraction: the newest positioned candidate's fused score is
multiplied by 1 + this, the oldest's by 1.
(why: docs/decisions.md#recency_weight--001-gatewaycorerecallfusionpy)"""
QUESTION_MARKS = frozenset("?\uff1f\u061f")
"""ASCII, full-width (Chinese, Japanese) and Arabic question marks."""


def reciprocal_rank_fusion(rankings: Sequence[Sequence[str]], *, k: int = RRF_K,
                           weights: Sequence[float] | None = None) -> dict[str, float]:
    """Id -> summed weight / (k + rank) over the rankings (each best first; a repeated id
    within one ranking counts at its best rank only). `weights`: one per ranking (default:
    1 each)."""
    scores: dict[str, float] = {}
    for ranking, weight in zip(rankings, weights or [1.0] * len(rankings), strict=True):
        seen: set[str] = set()
        for rank, item in enumerate(ranking, start=1):
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    return scores


def fuse(rankings: Sequence[Sequence[str]], positions: Mapping[str, int], *,
         k: int = RRF_K, recency_weight: float = RECENCY_WEIGHT,
         weights: Sequence[float] | None = None) -> list[tuple[str, float]]:
    """Ids with their fused, recency-weighted scores, best first. `positions` gives each
    item's place in the conversation (missing or negative: no place); `weights`, one per
    ranking, scale each ranking's share (default: 1 each)."""
    scores = reciprocal_rank_fusion(rankings, k=k, weights=weights)
    placed = [p for i in scores if (p := positions.get(i, -1)) >= 0]
    lo, hi = (min(placed), max(placed)) if placed else (0, 0)
    span = hi - lo

    def weighted(item: str, score: float) -> float:
        position = positions.get(item, -1)
        if position < 0 or span == 0:
            return score
        return score * (1.0 + recency_weight * (position - lo) / span)

    fused = [(item, weighted(item, score)) for item, score in scores.items()]
    fused.sort(key=lambda pair: (-pair[1], -positions.get(pair[0], -1), pair[0]))
    return fused


def with_context(dense: Sequence[str], previous: Mapping[str, str]) -> list[str]:
    """A dense ranking of context vectors as a ranking of turns. A turn is embedded after the
    turn before it (gateway/memory/jobs/turn_index.py), so a hit on turn j matches either j's own
    words or those of `previous[j]`: both are ranked there, j first (an id keeps its best
    rank).
    (why: docs/decisions.md#with_context-credits-the-previous-turn-gatewaycorerecallfusionpy)"""
    out: dict[str, None] = {}
    for item in dense:
        out.setdefault(item)
        if (before := previous.get(item)) is not None:
            out.setdefault(before)
    return list(out)


def asks(text: str) -> bool:
    """Whether a turn asks something (holds a question mark, in any of `QUESTION_MARKS`):
    whether the turn after it is worth bringing along as its answer (`with_successors`)."""
    # Three substring searches in C (memchr-fast): turns can be long, and the learned ranking
    # asks this of every candidate and the turn before it.
    return "?" in text or "\uff1f" in text or "\u061f" in text


def with_successors(ranked: Sequence[tuple[str, float]],
                    following: Mapping[str, str]) -> list[tuple[str, float]]:
    """`ranked` with each item's successor turn placed right after it (unless it ranks
    higher already), at the item's score: the answer to a recalled question is usually the
    next turn. Which items get a successor is the caller's choice (`following`); the recaller
    by default links only turns that ask something (`asks`).
    (why: docs/decisions.md#with_successors-after-questions-only-gatewaycorerecallfusionpy)"""
    out: dict[str, float] = {}
    for item, score in ranked:
        out.setdefault(item, score)
        if (after := following.get(item)) is not None:
            out.setdefault(after, score)
    return list(out.items())
