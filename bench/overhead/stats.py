"""Percentiles and result rows. Pure arithmetic, no I/O."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Sequence, TypedDict

Body = Literal["full", "forwarded"]


class Row(TypedDict):
    """One result row of overhead.json; the keys are a published format, keep them exact.

    `turns`: the conversation's length in the cell — stored (gateway-memory) or carried in the
    body (every other target gets the same history) — and None for a cell without history.
    `body`: what the client sent (`full`: the whole history + question; `forwarded`: the body
    the gateway forwarded for it). `baseline`: the body of the direct row subtracted for
    `added_*` — the body this target's upstream receives."""

    target: str
    stream: bool
    concurrency: int
    turns: int | None
    persist: bool
    body: Body
    baseline: Body
    tokens_in: int | None
    body_bytes: int
    n: int
    errors: int
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    baseline_p50_ms: float | None
    baseline_p99_ms: float | None
    added_p50_ms: float | None
    added_p99_ms: float | None
    rps: float | None
    reported_overhead_p50_ms: float | None


ROW_KEYS = tuple(Row.__annotations__)


@dataclass(frozen=True)
class CellKey:
    """What a cell's targets share: streaming or not, concurrency, conversation length, and
    whether gateway-memory records its turns (persist)."""

    stream: bool
    concurrency: int
    turns: int
    persist: bool = False

    def label(self) -> str:
        return (f"{'stream' if self.stream else 'json'}/c{self.concurrency}/t{self.turns}"
                + ("/persist" if self.persist else ""))


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


def row(target: str, cell: CellKey, *, body: Body, baseline: Body, latency_ms: Sequence[float],
        wall_s: float, baseline_ms: Sequence[float] | None, tokens_in: int | None = None,
        body_bytes: int = 0, errors: int = 0,
        reported_overhead_ms: Sequence[float] = ()) -> Row:
    """A result row. `baseline_ms` are the latencies of the direct target with the `baseline`
    body from the same cell (interleaved rounds): added_pXX = this pXX - baseline pXX, and 0
    for that direct row itself. None where there is nothing to compute from."""
    p = {q: _round(percentile(latency_ms, q)) if latency_ms else None for q in (50, 95, 99)}
    base = {q: _round(percentile(baseline_ms, q)) if baseline_ms else None for q in (50, 99)}

    def added(q: int) -> float | None:
        if p[q] is None or not baseline_ms:
            return None
        return _round(percentile(latency_ms, q) - percentile(baseline_ms, q))

    return Row(target=target, stream=cell.stream, concurrency=cell.concurrency,
               turns=cell.turns or None, persist=cell.persist, body=body, baseline=baseline,
               tokens_in=tokens_in, body_bytes=body_bytes, n=len(latency_ms), errors=errors,
               p50_ms=p[50], p95_ms=p[95], p99_ms=p[99],
               baseline_p50_ms=base[50], baseline_p99_ms=base[99],
               added_p50_ms=added(50), added_p99_ms=added(99),
               rps=_round(len(latency_ms) / wall_s, 1) if wall_s > 0 and latency_ms else None,
               reported_overhead_p50_ms=(_round(percentile(reported_overhead_ms, 50))
                                         if reported_overhead_ms else None))


def _round(value: float, digits: int = 2) -> float:
    return round(value, digits)
