"""What crosses the Messages and Responses doors as it crosses the chat door: the gateway's own
message markers — one-shot (`x_gateway_one_shot`) and pin (`x_gateway_pin`), read from an
Anthropic message or a Responses input item as the chat door reads them from a chat message
(gateway/pipeline/chat_request.py), and consumed there — and `x_` extension fields of a body or
an answer, carried as they are (the chat door carries every field)."""

from __future__ import annotations

from typing import Any, Mapping

from gateway.core.context.pinned import MARKER as PIN_MARKER
from gateway.core.one_shot import MARKER as ONE_SHOT_MARKER
from gateway.errors import BadRequest


def marks(data: Mapping[str, Any], where: str) -> tuple[bool, bool]:
    """(one-shot, pinned) of a message; `BadRequest` for a marker that is not a boolean or a
    message marked both (one-shot content is never stored; a pin is kept for good)."""
    flags = []
    for marker in (ONE_SHOT_MARKER, PIN_MARKER):
        value = data.get(marker, False)
        if not isinstance(value, bool):
            raise BadRequest(f"`{where}.{marker}` must be a boolean.", param=f"{where}.{marker}")
        flags.append(value)
    if flags[0] and flags[1]:
        raise BadRequest(f"`{where}` cannot be both one-shot and pinned.",
                         param=f"{where}.{PIN_MARKER}")
    return flags[0], flags[1]


EXTENSION_PREFIX = "x_"


def extensions(data: Mapping[str, Any]) -> dict[str, Any]:
    """The `x_`-prefixed fields of a body or an answer (a benchmark's scripted reply, say)."""
    return {k: v for k, v in data.items() if k.startswith(EXTENSION_PREFIX)}
