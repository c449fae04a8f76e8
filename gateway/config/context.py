"""How a tenant's prompts are sized and laid out (`tenants.<name>.context:`), and the core
policies built from it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gateway.config.strict import Strict
from gateway.core.one_shot import OneShotPolicy
from gateway.core.policy import ContextPolicy


class ContextConfig(Strict):
    max_context_tokens: int = Field(32000, gt=0)
    """The model's window as the tenant wants it used, prompt plus completion: a history that
    fits goes whole and append-only (the provider's prompt cache serves all of it but the new
    turn). Never more than the model's own window."""
    compact_to_tokens: int | None = Field(8000, gt=0)
    """A history over the window is compacted to this, prompt plus completion (at most
    `max_context_tokens`); null: to `max_context_tokens`."""
    reserve_completion_tokens: int = Field(1000, ge=0)
    max_recent_turns: int = Field(6, gt=0)
    truncate_message_tokens: int = Field(1000, gt=16)
    min_recent_turns: int = Field(1, ge=0)
    """The newest turns kept before recalled memory takes its share of the budget."""
    recent_share: float = Field(0.25, ge=0, le=1)
    """At most this share of the room for those newest turns: a longer turn is shortened
    (head and a visible mark), never dropped. 0: off."""
    # Shares of the room left after the client's system prompts and current message; what a
    # layer does not use flows to the recent turns (and what they leave, to recall).
    summary_share: float = Field(0.0, ge=0, le=1)
    profile_share: float = Field(0.05, ge=0, le=1)
    recall_share: float = Field(0.95, ge=0, le=1)
    assembly: Literal["auto", "rolling", "stepped"] = "auto"
    """How a compacted prompt is laid out: `stepped`, a verbatim window whose start moves only
    in steps, so that a provider's prompt cache serves consecutive prompts (profile and recall
    after it); `rolling`, the newest turns sliding by one exchange a request; `auto`, stepped
    from a 4,000-token prompt budget, rolling below (core.policy.STEPPED_FROM_TOKENS)."""
    window_share: float = Field(0.9, gt=0, le=1)
    """Stepped: the verbatim window grows to at most this share of the prompt budget."""
    outside_share: float = Field(0.05, ge=0, le=1)
    """When the history is forwarded whole (it fits the window): at most this share of the
    compacted prompt's room for memory from outside it (the profile, recall from the user's
    other conversations), once the conversation has a history; its first request gets the
    whole room. That tail is paid in full every turn (bench/README.md, "gateway bench cost")."""
    pinned_share: float = Field(0.25, ge=0, le=1)
    """At most this share for pinned messages, granted before the others (so it is not part
    of their sum): what is pinned is never shortened, and what does not fit waits. 0: pins
    are neither read nor shown (they stay listed in the memory API)."""
    continuity_turns: int = Field(3, ge=0)
    """At prompt budgets of at least `continuity_budget`, the newest this many user turns are
    always forwarded (shortened to fit `recent_share` if need be)."""
    continuity_budget: int = Field(4000, ge=0)
    """The prompt budget from which `continuity_turns` applies (below: `min_recent_turns`)."""
    one_shot_tool_chars: int | None = Field(8000, ge=1)
    """A `tool` message longer than this (characters of its text; ~2,000 tokens of English)
    is one-shot: forwarded in its request, stored only as a placeholder. null: only messages
    the client marks are (gateway/core/one_shot.py)."""

    @model_validator(mode="after")
    def _reserve_fits(self) -> ContextConfig:
        if self.reserve_completion_tokens >= self.max_context_tokens:
            raise ValueError("reserve_completion_tokens must be smaller than max_context_tokens")
        if self.compact_to_tokens is not None \
                and self.reserve_completion_tokens >= self.compact_to_tokens:
            raise ValueError("reserve_completion_tokens must be smaller than compact_to_tokens")
        if self.summary_share + self.profile_share + self.recall_share > 1:
            raise ValueError("summary_share + profile_share + recall_share must not exceed 1")
        return self

    def policy(self) -> ContextPolicy:
        fields = self.model_dump(exclude={"one_shot_tool_chars"})
        fields["compact_to_tokens"] = self.compact_to_tokens or 0
        return ContextPolicy(**fields)

    def one_shot(self) -> OneShotPolicy:
        return OneShotPolicy(tool_chars=self.one_shot_tool_chars)
