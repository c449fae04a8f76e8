"""The per-tenant context policy, as the pure core sees it (config.py builds it from YAML)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Assembly = Literal["auto", "rolling", "stepped"]

STEPPED_FROM_TOKENS = 4000
"""`assembly: auto` lays a compacted prompt out `stepped` from this prompt budget, `rolling`
below it: a small prompt's stable part is mostly under the providers' 1,024-token cache
minimum, so steps buy little, and the rolling layout recalls more there (why 4,000:
docs/decisions.md, "STEPPED_FROM_TOKENS")."""


@dataclass(frozen=True, slots=True)
class ContextPolicy:
    max_context_tokens: int = 32000
    """The model's whole window as the tenant wants it used: prompt plus completion. A history
    that fits is forwarded whole and append-only."""
    compact_to_tokens: int = 8000
    """A history that does not fit is compacted to this, prompt plus completion: smaller than
    the window, since a compacted prompt changes every turn or step and is paid in full while
    a history resent whole is mostly a provider's cached prefix (0.1-0.5x the price).
    0 (or more than `max_context_tokens`): compacted to `max_context_tokens`."""
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
    assembly: Assembly = "auto"
    """How a compacted prompt is laid out (gateway/core/context/rewrite.py): `rolling`, the
    newest turns after the memory blocks, sliding one exchange a request; `stepped`, a
    verbatim window whose start moves only in steps (gateway/core/context/steps.py), so that
    consecutive prompts share their prefix and a provider's prompt cache serves it, with the
    profile and recalled items after it; `auto`, stepped from `STEPPED_FROM_TOKENS`."""
    window_share: float = 0.9
    """Stepped: the verbatim window grows up to this share of the prompt budget, then restarts
    at a step where it holds about half of it. The window is the cached prefix, the rest (the
    recall tail) is paid in full every turn, so a larger window costs less and recalls a little
    less (why 0.9: docs/decisions.md, "context.window_share")."""
    pinned_share: float = 0.25
    """At most this much for the pinned block, granted first (before every other share):
    pinned messages are what the user or the application asked never to be dropped."""
    outside_share: float = 0.05
    """When the history goes whole: at most this share of the room (the compacted prompt's)
    for memory from outside it — the profile and what is recalled from the user's other
    conversations or learned elsewhere — once the conversation has a history. A tail after the
    history is paid in full every turn, so it is kept short; a conversation's first request
    (no history yet) gets the whole room, where memory of earlier conversations matters most
    (why 0.05: docs/decisions.md, "context.outside_share")."""
    continuity_turns: int = 3
    """At prompt budgets of at least `continuity_budget`, the newest this many user turns are
    always forwarded (fitted to `recent_share` of the room, never dropped), whatever recall
    would take: a conversation reads on from its last exchanges."""
    continuity_budget: int = 4000

    @property
    def prompt_budget(self) -> int:
        """What a compacted prompt may cost (`compact_to_tokens` less the completion's)."""
        window = self.max_context_tokens
        if 0 < self.compact_to_tokens < window:
            window = self.compact_to_tokens
        return max(0, window - self.reserve_completion_tokens)

    @property
    def whole_prompt_budget(self) -> int:
        """What a prompt with the history whole may cost: the window less the completion's."""
        return max(0, self.max_context_tokens - self.reserve_completion_tokens)

    @property
    def stepped(self) -> bool:
        """Whether a compacted prompt is laid out in steps (`assembly`)."""
        if self.assembly == "auto":
            return self.prompt_budget >= STEPPED_FROM_TOKENS
        return self.assembly == "stepped"

    @property
    def served_turns(self) -> int:
        """The newest user turns served before recall takes its share: `min_recent_turns`, and
        at budgets of `continuity_budget` and more at least `continuity_turns` (but no more
        than `max_recent_turns` for that)."""
        if self.prompt_budget >= self.continuity_budget:
            return max(self.min_recent_turns, min(self.continuity_turns, self.max_recent_turns))
        return self.min_recent_turns
