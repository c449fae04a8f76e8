"""The per-tenant context policy, as the pure core sees it (config.py builds it from YAML)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Assembly = Literal["rolling", "stepped"]


@dataclass(frozen=True, slots=True)
class ContextPolicy:
    max_context_tokens: int = 8000
    """The model's whole window as the tenant wants it used: prompt plus completion."""
    reserve_completion_tokens: int = 1000
    """Kept free for the completion; the forwarded prompt gets the rest."""
    max_recent_turns: int = 6
    """At most this many user turns of history are forwarded verbatim."""
    truncate_message_tokens: int = 1000
    """A history message longer than this is forwarded shortened (the stored one is not)."""
    min_recent_turns: int = 1
    """The newest user turns served before recall takes its share: a follow-up ("yes, do
    that") needs the last exchange more than anything memory can recall."""
    recent_share: float = 0.25
    """At most this share of the room for those newest turns when the history does not fit:
    longer, their messages are shortened (head and a visible mark) until they fit, so a
    650-token reply cannot take most of a small budget (0: off, they are not fitted)."""

    # Memory shares: fractions of the room left after instructions and the current turn (and
    # the reply priming). A share is a ceiling, not a reservation: what a block does not use
    # goes to the recent window. Validated by config.py, not here.
    summary_share: float = 0.0
    """At most this much for the conversation summary block."""
    profile_share: float = 0.05
    """At most this much for the user profile block."""
    recall_share: float = 0.95
    """Held back from the recent window for recalled items (less if they need less); the
    recalled block also gets whatever the window leaves unused."""
    assembly: Assembly = "rolling"
    """How an over-budget prompt is laid out (gateway/core/context/rewrite.py): `rolling`, the
    newest turns after the memory blocks, sliding one exchange a request; `stepped`, a
    verbatim window whose start moves only in steps (gateway/core/context/steps.py), so that
    consecutive prompts share their prefix and a provider's prompt cache serves it, with the
    profile and recalled items after it."""
    window_share: float = 0.5
    """Stepped: the verbatim window grows up to this share of the prompt budget, then restarts
    at a step where it holds about half of it."""
    pinned_share: float = 0.25
    """At most this much for the pinned block, granted first (before every other share):
    pinned messages are what the user or the application asked never to be dropped."""

    @property
    def prompt_budget(self) -> int:
        return max(0, self.max_context_tokens - self.reserve_completion_tokens)
