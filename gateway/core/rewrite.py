"""The rewrite: which messages the model sees for one request, under the tenant's budget.

Output order (DESIGN.md, "What the model sees"), cache friendly:

    [instructions] [summary block] [profile block] [recent history] [recalled block] [current]

Invariants (each pinned by tests/test_rewrite.py and tests/test_rewrite_properties.py):
- instructions and the current turn are forwarded verbatim and never dropped, even when they
  alone exceed the budget (then `over_budget` is set and nothing else is added);
- otherwise the forwarded prompt, counted with `count_messages`, fits `policy.prompt_budget`;
- when all of the history that can be forwarded (tool results without their call cannot) fits
  whole, it is forwarded whole and verbatim — no turn cap, no shortening, no summary block —
  plus only what memory knows from outside it: the profile and recalled items not all of
  whose sources are in the history, so `tokens_forwarded` is at most the conversation's own
  cost plus that outside memory. The rules below are for a history that does not fit:
- recent history is a contiguous suffix of the history, chronological, at most
  `policy.max_recent_turns` user turns, starting at a user message — except when not even the
  newest turn fits whole: then the newest messages of that turn that fit are forwarded alone
  (the model's last reply matters most to a follow-up such as "yes, do that");
- a tool call travels with its results: an assistant message and the tool messages after it are
  kept or dropped together, and a tool message is never forwarded without its call;
- a history message longer than `policy.truncate_message_tokens` is forwarded as a shortened
  copy (its head plus `TRUNCATION_MARKER`); inputs are never altered;
- memory is budgeted from the room left after instructions and the current turn, in this order:
  the summary block (the newest chunks that fit `policy.summary_share` of the room), the
  profile block (if it fits `policy.profile_share`), a reservation for recalled items (at most
  `policy.recall_share`, less if showing them all costs less); the recent window gets the rest.
  The recalled block then gets the reservation plus whatever the window left unused, packed
  best first, skipping what does not fit; a share a block does not use goes to the window;
- nothing is shown twice: a recalled turn is never one of the window's messages (by id), nor a
  recalled chunk whose source messages are all in the window, nor an item whose text is a
  window message's text or a higher-ranked item's (see `packing.drop_redundant`);
- with empty memory and everything fitting, the output is exactly instructions + history +
  current, the same `Message` values.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

from gateway.core.memory import BlockName, MemoryContext
from gateway.core.messages import Message, thaw
from gateway.core.packing import (
    drop_redundant,
    pack_profile,
    pack_recalled,
    pack_summary,
    recall_reservation,
    share,
    shown_texts,
)
from gateway.core.policy import ContextPolicy
from gateway.core.tokens import REPLY_PRIMING, Tokenizer, count_message

TRUNCATION_MARKER = " […]"
_ANSWER_ROLES = frozenset({"tool", "function"})

Conversation = tuple[Message, ...]
Unit = tuple[Message, ...]
"""Messages kept or dropped together: one message plus the tool results that follow it."""


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

    def __post_init__(self) -> None:
        for name in ("instructions", "history", "current", "history_ids"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.history_ids and len(self.history_ids) != len(self.history):
            raise ValueError(f"history_ids has {len(self.history_ids)} ids for "
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


def split_current(conversation: Sequence[Message]) -> tuple[Conversation, Conversation]:
    """(history, current) of a conversation without instructions: the current turn starts at
    the last user message. Without any user message nothing is history: there is no turn
    boundary to cut at, so the whole conversation is the current turn, forwarded verbatim."""
    messages = tuple(conversation)
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "user":
            return messages[:i], messages[i:]
    return (), messages


def rewrite(request: RewriteRequest, tokenizer: Tokenizer) -> Rewrite:
    """The messages to forward upstream for `request` (see the module docstring)."""
    policy = request.policy
    fixed = request.instructions + request.current
    fixed_cost = _sum_cost(fixed, tokenizer)
    history_cost = _sum_cost(request.history, tokenizer)
    tokens_original = _total(fixed_cost + history_cost, bool(fixed or request.history))

    if _total(fixed_cost, bool(fixed)) > policy.prompt_budget:
        return Rewrite(messages=fixed, tokens_original=tokens_original,
                       tokens_forwarded=_total(fixed_cost, bool(fixed)), recent_turns=0,
                       history_kept=0, truncated=0, over_budget=True)

    # Anything added makes the prompt non-empty, so the reply priming is always paid.
    room = policy.prompt_budget - REPLY_PRIMING - fixed_cost
    memory = request.memory
    forwardable = tuple(m for unit in _units(request.history) for m in unit)
    forwardable_cost = _sum_cost(forwardable, tokenizer)
    if forwardable_cost <= room:
        return _whole_history(request, forwardable, room - forwardable_cost, tokens_original,
                              fixed_cost + forwardable_cost, tokenizer)
    # Each grant is capped by what is left too, so shares that add up past 1 still fit.
    summary = pack_summary(memory.summary_chunks, share(policy.summary_share, room), tokenizer)
    left = room - summary.cost
    profile = pack_profile(memory.profile, min(share(policy.profile_share, room), left),
                           tokenizer)
    left -= profile.cost
    offered = drop_redundant(memory.recalled, frozenset(), summary.items)
    candidates = _unsummarized(request, summary.block is not None)
    first = _recent_window(candidates, left, replace(policy, max_recent_turns=min(
        policy.min_recent_turns, policy.max_recent_turns)), tokenizer)
    reserved = recall_reservation(offered, min(share(policy.recall_share, room),
                                               left - first.cost), tokenizer)
    window = _recent_window(candidates, left - reserved, policy, tokenizer)
    offered = drop_redundant(offered, _window_ids(request, window), (),
                             shown_texts(window.messages))
    recalled = pack_recalled(offered, left - window.cost, tokenizer)

    blocks: tuple[tuple[BlockName, Message | None], ...] = (
        ("summary", summary.block), ("profile", profile.block), ("recalled", recalled.block))
    messages = (
        request.instructions
        + tuple(b for b in (summary.block, profile.block) if b is not None)
        + window.messages
        + tuple(b for b in (recalled.block,) if b is not None)
        + request.current
    )
    memory_cost = summary.cost + profile.cost + recalled.cost
    return Rewrite(
        messages=messages,
        tokens_original=tokens_original,
        tokens_forwarded=_total(fixed_cost + memory_cost + window.cost, bool(messages)),
        recent_turns=sum(1 for m in window.messages if m.role == "user"),
        history_kept=len(window.messages),
        truncated=window.truncated,
        over_budget=False,
        memory_blocks=tuple(name for name, block in blocks if block is not None),
        summary_chunks=len(summary.items),
        recalled=len(recalled.items),
        recalled_ids=tuple(r.id for r in recalled.items),
        summary_tokens=summary.cost,
        profile_tokens=profile.cost,
        recalled_tokens=recalled.cost,
    )


def _whole_history(request: RewriteRequest, history: tuple[Message, ...], left: int,
                   tokens_original: int, fixed_cost: int, tokenizer: Tokenizer) -> Rewrite:
    """The history fits: all of it (`history`: what of it can be forwarded), verbatim, plus
    only what memory knows from outside it — the profile and recalled items not all of whose
    sources it holds (facts learned elsewhere, other conversations) — in the room `left`.
    Never a summary of turns it shows, so the prompt costs at most the conversation plus that
    outside memory."""
    profile = pack_profile(request.memory.profile, left, tokenizer)
    ids = frozenset(i for i in request.history_ids if i is not None)
    # A fact learned from turns shown here says again what they say.
    outside = tuple(r for r in request.memory.recalled
                    if not (r.kind == "fact" and r.source_ids and ids.issuperset(r.source_ids)))
    offered = drop_redundant(outside, ids, (), shown_texts(history))
    recalled = pack_recalled(offered, left - profile.cost, tokenizer)
    blocks: tuple[tuple[BlockName, Message | None], ...] = (
        ("profile", profile.block), ("recalled", recalled.block))
    messages = (request.instructions + tuple(b for b in (profile.block,) if b is not None)
                + history + tuple(b for b in (recalled.block,) if b is not None)
                + request.current)
    return Rewrite(
        messages=messages,
        tokens_original=tokens_original,
        tokens_forwarded=_total(fixed_cost + profile.cost + recalled.cost, bool(messages)),
        recent_turns=sum(1 for m in history if m.role == "user"),
        history_kept=len(history),
        truncated=0,
        over_budget=False,
        memory_blocks=tuple(name for name, block in blocks if block is not None),
        recalled=len(recalled.items),
        recalled_ids=tuple(r.id for r in recalled.items),
        profile_tokens=profile.cost,
        recalled_tokens=recalled.cost,
    )


def _unsummarized(request: RewriteRequest, summary_shown: bool) -> tuple[Message, ...]:
    """The history the recent window may draw from: after the last summarised message when
    the summary block is shown (and that message is found in this request's history — after a
    fork it may not be), else all of it."""
    boundary = request.memory.summarized_through
    if not summary_shown or boundary is None or boundary not in request.history_ids:
        return request.history
    return request.history[request.history_ids.index(boundary) + 1:]


def _window_ids(request: RewriteRequest, window: _Window) -> frozenset[str]:
    """Stored ids of the history messages in the window (a suffix of the history)."""
    if not request.history_ids or not window.messages:
        return frozenset()
    kept = request.history_ids[len(request.history) - len(window.messages):]
    return frozenset(i for i in kept if i is not None)


def truncate_message(message: Message, max_tokens: int, tokenizer: Tokenizer) -> Message:
    """`message` itself if its text has at most `max_tokens` tokens, else a copy whose text is
    cut to its first `max_tokens` tokens followed by `TRUNCATION_MARKER`. In a list of content
    parts the text parts share the limit in order: the part that overflows is cut and marked,
    later text parts are dropped, other parts (images, audio, files) are all kept."""
    content = message.content
    if content is None or tokenizer.count(message.text) <= max_tokens:
        return message
    if isinstance(content, str):
        return message.with_content(_cut(content, max_tokens, tokenizer))
    parts, changed = _truncate_parts(thaw(content), max_tokens, tokenizer)
    return message.with_content(parts) if changed else message


def _truncate_parts(parts: list[Any], max_tokens: int,
                    tokenizer: Tokenizer) -> tuple[list[Any], bool]:
    out: list[Any] = []
    room, cut = max_tokens, False
    for part in parts:
        if not (isinstance(part, dict) and isinstance(part.get("text"), str)):
            out.append(part)
            continue
        if cut:
            continue
        n = tokenizer.count(part["text"])
        if n <= room:
            out.append(part)
            room -= n
        else:
            out.append({**part, "text": _cut(part["text"], room, tokenizer)})
            cut = True
    return out, cut


def _cut(text: str, max_tokens: int, tokenizer: Tokenizer) -> str:
    return tokenizer.truncate(text, max(0, max_tokens)) + TRUNCATION_MARKER


@dataclass(frozen=True, slots=True)
class _Window:
    messages: tuple[Message, ...] = ()
    cost: int = 0
    truncated: int = 0


def _recent_window(history: tuple[Message, ...], room: int, policy: ContextPolicy,
                   tokenizer: Tokenizer) -> _Window:
    """The newest whole turns that fit `room` (at most `max_recent_turns` user turns),
    chronological; stops at the first turn that does not fit. If not even the newest turn
    fits whole, its newest units that fit instead."""
    kept: list[Unit] = []  # newest first
    cost = user_turns = 0
    for turn in reversed(_turns(_units(history))):
        is_user_turn = turn[0][0].role == "user"
        if is_user_turn and user_turns >= policy.max_recent_turns:
            break
        shortened = [_shorten(unit, policy, tokenizer) for unit in turn]
        costs = [_sum_cost(unit, tokenizer) for unit in shortened]
        if cost + sum(costs) <= room:
            kept.extend(reversed(shortened))
            cost += sum(costs)
            user_turns += is_user_turn
            continue
        if not kept:
            # The user message opens the turn, so a partial turn never includes it.
            for unit, unit_cost in zip(reversed(shortened), reversed(costs)):
                if cost + unit_cost > room:
                    break
                kept.append(unit)
                cost += unit_cost
        break
    messages = tuple(m for unit in reversed(kept) for m in unit)
    originals = history[len(history) - len(messages):]  # the window is a suffix of history
    return _Window(messages=messages, cost=cost,
                   truncated=sum(1 for m, o in zip(messages, originals) if m is not o))


def _units(history: tuple[Message, ...]) -> list[Unit]:
    """History cut into units: each message with the tool/function results after it. Results
    at the very start of the history answer a call that is not there; they are never
    forwarded (the provider would reject them)."""
    units: list[list[Message]] = []
    for message in history:
        if message.role in _ANSWER_ROLES:
            if units:
                units[-1].append(message)
            continue
        units.append([message])
    return [tuple(unit) for unit in units]


def _turns(units: list[Unit]) -> list[tuple[Unit, ...]]:
    """Units grouped into turns, each opened by a user message; units before the first user
    message form a turn of their own (it counts as no user turn)."""
    turns: list[list[Unit]] = []
    for unit in units:
        if unit[0].role == "user" or not turns:
            turns.append([unit])
        else:
            turns[-1].append(unit)
    return [tuple(turn) for turn in turns]


def _shorten(unit: Unit, policy: ContextPolicy, tokenizer: Tokenizer) -> Unit:
    return tuple(truncate_message(m, policy.truncate_message_tokens, tokenizer) for m in unit)


def _sum_cost(messages: Sequence[Message], tokenizer: Tokenizer) -> int:
    return sum(count_message(m, tokenizer) for m in messages)


def _total(message_cost: int, any_messages: bool) -> int:
    """count_messages from the sum of count_message: the priming is paid once, if any."""
    return REPLY_PRIMING + message_cost if any_messages else 0
