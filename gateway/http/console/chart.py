"""The request view's charts: tokens of the full conversation vs tokens forwarded, per request,
and spend vs what the whole history would have cost, added up over the requests — drawn
server-side as inline SVG (no chart library, no script). Only numbers reach the markup."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

WIDTH, HEIGHT, PAD = 720, 180, 24


@dataclass(frozen=True, slots=True)
class TokenChart:
    original: str
    """SVG polyline points of the original tokens, oldest request on the left."""
    forwarded: str
    peak: int
    requests: int
    forwarded_percent: float
    """Tokens forwarded as a share of the original tokens, over these requests (above 100
    when memory added more than the recent window left out)."""
    width: int = WIDTH
    height: int = HEIGHT


def token_chart(entries: Sequence[dict[str, Any]]) -> TokenChart | None:
    """From request-log entries newest first; None if none has token counts."""
    rows = [(int(e["tokens_original"]), int(e["tokens_forwarded"])) for e in reversed(entries)
            if isinstance(e.get("tokens_original"), int)
            and isinstance(e.get("tokens_forwarded"), int)]
    if not rows:
        return None
    peak = max(max(o, f) for o, f in rows) or 1
    step = (WIDTH - 2 * PAD) / max(len(rows) - 1, 1)

    scale = (HEIGHT - 2 * PAD) / peak

    def points(column: int) -> str:
        return " ".join(f"{PAD + i * step:.1f},{HEIGHT - PAD - row[column] * scale:.1f}"
                        for i, row in enumerate(rows))

    original = sum(o for o, _ in rows)
    share = 100 * sum(f for _, f in rows) / original if original else 0.0
    return TokenChart(points(0), points(1), peak, len(rows), round(share, 1))


@dataclass(frozen=True, slots=True)
class SpendChart:
    spent: str
    """SVG polyline points of the spend added up, oldest request on the left."""
    whole: str
    """The same of what the whole history would have cost."""
    spend: float
    whole_cost: float
    requests: int
    width: int = WIDTH
    height: int = HEIGHT


def spend_chart(entries: Sequence[dict[str, Any]]) -> SpendChart | None:
    """From request-log entries newest first: the priced ones; None if there is none."""
    rows = [(float(e["spend"]), float(e["whole_cost"])) for e in reversed(entries)
            if isinstance(e.get("spend"), (int, float))
            and isinstance(e.get("whole_cost"), (int, float))]
    if not rows:
        return None
    spent, whole, running = [], [], [0.0, 0.0]
    for spend, cost in rows:
        running[0] += spend
        running[1] += cost
        spent.append(running[0])
        whole.append(running[1])
    peak = max(whole[-1], spent[-1]) or 1.0
    step = (WIDTH - 2 * PAD) / max(len(rows) - 1, 1)
    scale = (HEIGHT - 2 * PAD) / peak

    def points(values: list[float]) -> str:
        return " ".join(f"{PAD + i * step:.1f},{HEIGHT - PAD - v * scale:.1f}"
                        for i, v in enumerate(values))

    return SpendChart(points(spent), points(whole), round(spent[-1], 9), round(whole[-1], 9),
                      len(rows))
