"""Who a request belongs to, and which ids are acceptable."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Ids become parts of store keys and log fields: keep them short and free of separators,
# spaces and control characters.
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:+=-]{0,127}")
ANONYMOUS_USER = "-"


def valid_id(value: str) -> bool:
    return ID_PATTERN.fullmatch(value) is not None


@dataclass(frozen=True, slots=True)
class ConversationKey:
    """A conversation belongs to one user of one tenant; memory never crosses these."""

    tenant: str
    user: str
    conversation: str

    @property
    def identified(self) -> bool:
        """Whether the request named its user. User-level memory (facts, profile) spans
        conversations, so it needs one: requests without a user id share the anonymous user
        and must never share its memory."""
        return self.user != ANONYMOUS_USER
