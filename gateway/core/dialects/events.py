"""Server-sent events as the Anthropic and Responses streams write them."""

from __future__ import annotations

import json
from typing import Any


def sse(event: dict[str, Any]) -> bytes:
    """One event: its `type` named on the `event:` line, then the data (compact JSON)."""
    return b"event: " + event["type"].encode() + b"\ndata: " + \
        json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"
