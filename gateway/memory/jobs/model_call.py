"""One call to a tenant's model for memory work (summaries, topic decisions).

Memory work falls back on any failure of its model (an extractive summary, embedding drift),
so a call never raises: it returns the model's answer, or why there is none.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from gateway.errors import UpstreamError
from gateway.ports import Upstream, UpstreamCall

log = logging.getLogger("gateway.memory")


async def ask(upstream: Upstream, call: UpstreamCall, what: str) -> tuple[Any, str | None]:
    """(the response, None), or (None, why not). `what` names the model's job in the log."""
    try:
        # The upstream applies `call.timeout` too; this bounds any upstream that does not.
        async with asyncio.timeout(call.timeout):
            return await upstream.complete(call), None
    except TimeoutError:
        return None, "timed out"
    except UpstreamError as exc:
        return None, f"upstream error {exc.status}: {exc.message}"
    except Exception as exc:  # noqa: BLE001 — any other failure means "no answer": fall back
        log.warning("%s model %s failed unexpectedly", what, call.model, exc_info=True)
        return None, type(exc).__name__
