"""What a rewrite is given (`RewriteRequest`) and what it returns (`Rewrite`); the rewrite
itself is gateway/core/context/rewrite.py."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.core.context.blocks import BlockName, MemoryContext
from gateway.core.messages import Message
from gateway.core.policy import ContextPolicy

Conversation = tuple[Message, ...]


@dataclass(frozen=True, slots=True)
class RewriteRequest:
    instructions: tuple[Message, ...]
    """The client's system/developer messages, in order (also those sent mid-conversation)."""
    history: tuple[Message, ...]
    """The reconciled conversation before the current turn, oldest first."""
    current: tuple[Message, ...]
    """The last user message and everything after it (tool calls and results), verbatim."""
    policy: ContextPolicy
    memory: MemoryContext = MemoryContext()
    history_ids: tuple[str | None, ...] = ()
    """The stored message id of each history message (None for one not stored yet); empty when
    unknown, and then no recollection can be recognised as already in the window."""
    history_costs: tuple[int, ...] | None = None
    """`count_message` of each history message when the caller knows them (the pipeline keeps
    them by chained id: gateway/pipeline/history_costs.py); None: counted here."""

    def __post_init__(self) -> None:
        for name in ("instructions", "history", "current", "history_ids"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.history_ids and len(self.history_ids) != len(self.history):
            raise ValueError(f"history_ids has {len(self.history_ids)} ids for "
                             f"{len(self.history)} history messages")
        if self.history_costs is not None and len(self.history_costs) != len(self.history):
            raise ValueError(f"history_costs has {len(self.history_costs)} costs for "
                             f"{len(self.history)} history messages")


@dataclass(frozen=True, slots=True)
class Rewrite:
    messages: tuple[Message, ...]
    tokens_original: int
    """count_messages(instructions + history + current)."""
    tokens_forwarded: int
    """count_messages(messages)."""
    recent_turns: int
    """User turns of history forwarded."""
    history_kept: int
    """History messages forwarded (shortened or not)."""
    truncated: int
    """History messages forwarded as shortened copies."""
    over_budget: bool
    """Instructions and the current turn alone exceed the budget; they were forwarded anyway."""
    whole: bool = False
    """The history went whole (all of it that can be forwarded, verbatim): memory added only
    what it knows from outside it (gateway/core/context/whole.py)."""
    memory_blocks: tuple[BlockName, ...] = ()
    """The memory blocks forwarded, in priority order."""
    summary_chunks: int = 0
    """Summary chunks forwarded (the newest ones)."""
    recalled: int = 0
    """Recollections forwarded."""
    recalled_ids: tuple[str, ...] = ()
    """Their ids, in the order shown (for logs and diagnostics)."""
    summary_tokens: int = 0
    """count_message of the summary block (0 without one); likewise the next two."""
    profile_tokens: int = 0
    recalled_tokens: int = 0
    pinned: int = 0
    """Pinned messages forwarded in the pinned block."""
    pinned_ids: tuple[str, ...] = ()
    """Their ids, in the order shown."""
    pinned_tokens: int = 0
    message_limit: int | None = None
    """The length (tokens) history messages were shortened to, when less than the policy's
    `truncate_message_tokens`: the newest turns were fitted to `recent_share` of the room."""
    stable_messages: int | None = None
    """How many leading messages are the prompt's stable prefix — what the next request of
    the conversation repeats unless memory or a step changes it (a provider's cache
    breakpoint goes at its end): the instructions, the blocks before the history and the
    history forwarded whole or the stepped window; None: the rolling window slides, only the
    leading system messages are stable."""
    tool_results_cleared: int = 0
    """Tool results of a compacted tool loop forwarded as placeholders."""
    exchanges_dropped: int = 0
    """Exchanges of a compacted tool loop left out."""
