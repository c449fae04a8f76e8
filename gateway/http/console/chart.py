"""The request view's chart: tokens of the full conversation vs tokens forwarded, per request,
drawn server-side as inline SVG (no chart library, no script). Only numbers reach the markup."""

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
