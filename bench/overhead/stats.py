"""Percentiles and result rows. Pure arithmetic, no I/O."""

from __future__ import annotations

import math
from typing import Sequence, TypedDict


class Row(TypedDict):
    """One result row of overhead.json; the keys are a published format, keep them exact."""

    target: str
    stream: bool
    concurrency: int
    n: int
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    added_p50_ms: float | None
    added_p99_ms: float | None
    rps: float | None


ROW_KEYS = tuple(Row.__annotations__)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks (numpy's
    default), so p50 of [1, 2, 3, 4] is 2.5."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0..100")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def row(target: str, *, stream: bool, concurrency: int, latency_ms: Sequence[float],
        wall_s: float, direct_ms: Sequence[float] | None) -> Row:
    """A result row. `direct_ms` are the direct target's latencies from the same cell (same
    stream and concurrency, interleaved rounds): added_pXX = this pXX - direct pXX, and
    0 for direct itself. None where there is nothing to compute from."""
    p = {q: _round(percentile(latency_ms, q)) if latency_ms else None for q in (50, 95, 99)}

    def added(q: int) -> float | None:
        if p[q] is None or not direct_ms:
            return None
        return _round(percentile(latency_ms, q) - percentile(direct_ms, q))

    return Row(target=target, stream=stream, concurrency=concurrency, n=len(latency_ms),
               p50_ms=p[50], p95_ms=p[95], p99_ms=p[99],
               added_p50_ms=added(50), added_p99_ms=added(99),
               rps=_round(len(latency_ms) / wall_s, 1) if wall_s > 0 and latency_ms else None)


def _round(value: float, digits: int = 2) -> float:
    return round(value, digits)
