"""The rewrite: which messages the model sees for one request, under the tenant's budget.

Output order, cache friendly. A history that fits the window (`policy.max_context_tokens`) goes
whole and append-only, what memory adds after it:

    [instructions] [pinned block] [whole history] [profile block] [recalled block] [current]

over it, compacted to the prompt budget (`policy.compact_to_tokens`):

    [instructions] [pinned block] [summary block] [profile block] [recent history]
    [recalled block] [current]

and with `policy.stepped` (`assembly: stepped`, or `auto` from 4,000 tokens), over the budget (`_stepped`; the invariants below that
name the recent window's turn cap and fitted length are the rolling window's):

    [instructions] [pinned block] [summary block] [window, moving in steps]
    [profile block] [recalled block] [current]

where everything before the profile repeats the previous request's prompt between steps
(gateway/core/context/steps.py; tests/unit/test_steps.py). `Rewrite.stable_messages` says how
many leading messages are that stable prefix (a provider's cache breakpoint goes at its end).

A conversation's memory brief (`MemoryContext.brief`, gateway/core/context/brief.py), when it
has one, goes right after [instructions] in each of these, unchanged (`rewrite`).

Invariants (each pinned by tests/unit/test_rewrite.py and tests/unit/test_rewrite_properties.py):
- instructions and the current turn are forwarded verbatim and never dropped, even when they
  alone exceed the budget (then `over_budget` is set and nothing else is added);
- otherwise the forwarded prompt, counted with `count_messages`, fits `policy.prompt_budget`
  (`compact_to_tokens`) — or `policy.whole_prompt_budget` (the window) when the history goes
  whole;
- when all of the history that can be forwarded (tool results without their call cannot) fits
  whole, it is forwarded whole and verbatim — no turn cap, no shortening, no summary block —
  plus only what memory knows from outside it: the profile (unless it was learned from this
  conversation alone) and recalled items not all of whose sources are in the history, so
  `tokens_forwarded` is at most the conversation's own cost plus that outside memory — at most
  `policy.outside_share` of the room once there is a history (a tail paid in full every turn).
  The rules below are for a history that does not fit:
- recent history is a contiguous suffix of the history, chronological, at most
  `policy.max_recent_turns` user turns, starting at a user message — except when not even the
  newest turn fits whole: then the newest messages of that turn that fit are forwarded alone
  (the model's last reply matters most to a follow-up such as "yes, do that");
- the newest `policy.served_turns` turns (`min_recent_turns`, and at least
  `continuity_turns` at budgets of `continuity_budget` and more) take at most `policy.recent_share` of the room:
  when they cost more, every history message is shortened to the longest length (below
  `truncate_message_tokens`) with which they fit, marked as shortened — never dropped for
  being long (`Rewrite.message_limit` reports that length);
- a tool call travels with its results: an assistant message and the tool messages after it are
  kept or dropped together, and a tool message is never forwarded without its call;
- a history message longer than `policy.truncate_message_tokens` (or the fitted length above)
  is forwarded as a shortened copy (its head plus `TRUNCATION_MARKER`); inputs are never
  altered;
- the memory blocks' headers are in the current message's language (`blocks.framing_for`);
- pinned messages (gateway/core/context/pinned.py) are never shortened: each is shown whole in the
  pinned block or not at all. The block gets at most `policy.pinned_share` of the room, first;
  a pin the instructions, the current turn or the forwarded history show is not repeated (by
  id or by text). When all of the history fits beside the pins it does not show, it is
  forwarded whole (above); else the pins are packed before the window is sized, and those the
  window turns out to show are taken out again (their tokens go to the recalled block);
- memory is budgeted from the room left after instructions, the current turn and the pinned
  block, in this order: the summary block (the newest chunks that fit `policy.summary_share`
  of the room), the profile block (if it fits `policy.profile_share`), a reservation for
  recalled items (at most `policy.recall_share`, less if showing them all costs less); the
  recent window gets the rest.
  The recalled block then gets the reservation plus whatever the window left unused, packed
  best first, skipping what does not fit — page-long items after the shorter ones unless the
  message asks what the assistant said (gateway/core/recall/pages.py, in every assembly; in the
  stepped one also an item costing more than half the block's room); a share a block does not
  use goes to the window;
- nothing is shown twice: a recalled turn is never one of the window's messages forwarded whole
  (by id; a message the window shows shortened may be recalled whole), nor a
  recalled chunk whose source messages are all in the window, nor an item whose text is a
  window message's text or a higher-ranked item's (see `packing.drop_redundant`);
- with nothing pinned, the output is what it was before pins existed (the goldens of
  tests/unit/test_rewrite_golden.py);
- with empty memory and everything fitting, the output is exactly instructions + history +
  current, the same `Message` values.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from gateway.core.context.blocks import BlockName, Framing, PinnedMessage, framing_for
from gateway.core.messages import Message
from gateway.core.context.packing import (
    Packed,
    drop_redundant,
    pack_profile,
    pack_recalled,
    pack_summary,
    recall_reservation,
    recalled_lines,
    share,
    shown_texts,
)
from gateway.core.context.pinned import not_shown, pack_pinned, pin_text
from gateway.core.context.rewrite_request import Conversation, Rewrite, RewriteRequest
from gateway.core.context.steps import estimated_costs, step_points, window_starts
from gateway.core.context.tool_loop import allowances, is_tool_loop, loop_window, split_loop
from gateway.core.recall.need import asks_what_you_said
from gateway.core.recall.pages import pages_last
from gateway.core.recall.recollection import Recollection
from gateway.core.text.tokens import REPLY_PRIMING, Tokenizer, count_each, count_message
from gateway.core.context.whole import loop_fit, plain_fit
from gateway.core.context.window import (Window, fitted_length, recent_window, served_start,
                                         window_from)

def split_current(conversation: Sequence[Message]) -> tuple[Conversation, Conversation]:
    """(history, current) of a conversation without instructions: the current turn starts at
    the last user message — in a tool loop, at the last user instruction (text attached to
    tool results is part of their step), or at the newest loop step when the conversation
    ends in one (`tool_loop.split_loop`). Without any user message nothing is history: there
    is no turn boundary to cut at, so the whole conversation is the current turn, forwarded
    verbatim."""
    return split_loop(conversation)


def rewrite(request: RewriteRequest, tokenizer: Tokenizer) -> Rewrite:
    """The messages to forward upstream for `request` (see the module docstring), with the
    conversation's memory brief (`MemoryContext.brief`) right after the instructions: placed
    and budgeted as one of them, so it is part of the stable prefix in every assembly; when
    the instructions, the brief and the current turn alone exceed the budget, the request is
    rewritten without the brief."""
    recalled = pages_last(request.memory.recalled, _message(request))
    if recalled is not request.memory.recalled:
        request = replace(request, memory=replace(request.memory, recalled=recalled))
    brief = request.memory.brief
    if brief is None:
        return _rewrite(request, tokenizer)
    plain = replace(request, memory=replace(request.memory, brief=None, brief_tokens=0))
    briefed = _rewrite(replace(plain, instructions=request.instructions + (brief,)), tokenizer)
    if briefed.over_budget:
        return _rewrite(plain, tokenizer)
    cost = count_message(brief, tokenizer)
    return replace(briefed, tokens_original=briefed.tokens_original - cost
                   if request.instructions or request.history or request.current else 0,
                   memory_blocks=("brief",) + briefed.memory_blocks)


def _rewrite(request: RewriteRequest, tokenizer: Tokenizer) -> Rewrite:
    """The rewrite of `request` without a brief (see `rewrite`).

    Each history message is counted once (`count_each`; the tokenizer may cache counts by
    text, so a message seen before costs a lookup) unless the request brings the counts, and
    the counts are reused; beyond that, only the newest turns are looked at. Memory blocks are
    priced in one pass over their items (gateway/core/context/packing.py)."""
    policy = request.policy
    fixed = request.instructions + request.current
    fixed_cost = _sum_cost(fixed, tokenizer)
    costs = request.history_costs
    if costs is None:
        costs = count_each(request.history, tokenizer)
    tokens_original = _total(fixed_cost + sum(costs), bool(fixed or request.history))
    if is_tool_loop(request.history, request.current):
        return _tool_loop(request, costs, fixed_cost, tokens_original, tokenizer)

    if _total(fixed_cost, bool(fixed)) > policy.prompt_budget:
        return Rewrite(messages=fixed, tokens_original=tokens_original,
                       tokens_forwarded=_total(fixed_cost, bool(fixed)), recent_turns=0,
                       history_kept=0, truncated=0, over_budget=True)

    # Anything added makes the prompt non-empty, so the reply priming is always paid.
    room = policy.prompt_budget - REPLY_PRIMING - fixed_cost
    memory = request.memory
    framing = framing_for(m.text for m in request.current if m.role == "user")
    fit = plain_fit(request, costs, fixed_cost, tokenizer, framing)
    if fit.whole:
        return _whole_history(request, request.history[fit.start:], fit.left, tokens_original,
                              fixed_cost + sum(costs[fit.start:]), tokenizer, fit.pinned,
                              framing)
    fixed_texts = shown_texts(fixed)
    # Each grant is capped by what is left too, so shares that add up past 1 still fit.
    pinned, summary = _head_blocks(request, room, fixed_texts, tokenizer, framing)
    if policy.stepped:
        return _stepped(request, costs, room, pinned, summary, tokens_original, fixed_cost,
                        tokenizer, framing)
    pinned_ids, pinned_texts = _pins_shown(pinned.items)
    left = room - pinned.cost - summary.cost
    profile = pack_profile(memory.profile, min(share(policy.profile_share, room), left),
                           tokenizer, framing)
    left -= profile.cost
    offered = drop_redundant(recalled_lines(memory.recalled, tokenizer), pinned_ids,
                             summary.items, pinned_texts)
    begin = _unsummarized(request, summary.block is not None)
    candidates, candidate_costs = request.history[begin:], costs[begin:]
    # The newest turns are served first, but only up to their share of the room: a longer one
    # is shortened (every message of it cut to one length, marked), never dropped.
    limit = fitted_length(candidates, candidate_costs,
                          min(share(policy.recent_share, room), left), policy, tokenizer) \
        if policy.recent_share > 0 else policy.truncate_message_tokens
    fitted = limit < policy.truncate_message_tokens
    policy = replace(policy, truncate_message_tokens=limit)
    newest = replace(policy, max_recent_turns=min(policy.served_turns,
                                                  policy.max_recent_turns))
    first = recent_window(candidates, candidate_costs, left, newest, tokenizer)
    reserved = recall_reservation(offered, min(share(policy.recall_share, room),
                                               left - first.cost), tokenizer, framing)
    window = recent_window(candidates, candidate_costs, left - reserved, policy, tokenizer)
    freed = pinned.cost
    pinned = _without_shown_pins(request, window, pinned, tokenizer, framing)
    left += freed - pinned.cost  # the tokens it frees go to recall
    # A window message cut to fit is not shown: the turn may still be recalled whole (its
    # relevant part is often after the cut), if it ranks and fits like any other.
    whole_ids, whole_texts = _shown_whole(request, window)
    offered = drop_redundant(offered, whole_ids, (), whole_texts)
    recalled = pack_recalled(offered, left - window.cost, tokenizer, framing)

    messages = (
        request.instructions
        + tuple(b for b in (pinned.block, summary.block, profile.block) if b is not None)
        + window.messages
        + tuple(b for b in (recalled.block,) if b is not None)
        + request.current
    )
    return _assembled(messages, tokens_original, fixed_cost, window, pinned, summary, profile,
                      recalled, message_limit=limit if fitted else None)


def _tool_loop(request: RewriteRequest, costs: tuple[int, ...], fixed_cost: int,
               tokens_original: int, tokenizer: Tokenizer) -> Rewrite:
    """An agent's tool loop (gateway/core/context/tool_loop.py): forwarded whole while it fits
    the window, with memory from outside it after it; beyond, compacted within the window —
    the task and user instructions whole, older exchanges' results cleared, the oldest
    exchanges dropped, in steps — with the pinned block first and the profile and recalled
    blocks after it (at most `outside_share` of the compacted room, a tail paid every turn).
    The newest exchange goes whole; when it does not fit beside the task and the user's
    instructions, it goes with them anyway, and `over_budget` says so."""
    policy, memory = request.policy, request.memory
    framing = framing_for(m.text for m in request.current if m.role == "user")
    fit = loop_fit(request, costs, fixed_cost, tokenizer, framing)
    history, costs, pinned = request.history[fit.start:], costs[fit.start:], fit.pinned
    if fit.whole:
        return _whole_history(request, history, fit.left, tokens_original,
                              fixed_cost + sum(costs), tokenizer, pinned, framing)
    ceiling = policy.whole_prompt_budget - REPLY_PRIMING - fixed_cost
    room = max(0, policy.prompt_budget - REPLY_PRIMING - fixed_cost)
    tail = share(policy.outside_share, room)
    profile = pack_profile(memory.profile, min(share(policy.profile_share, room), tail),
                           tokenizer, framing)
    offered = recalled_lines(memory.recalled, tokenizer)
    reserved = recall_reservation(offered, tail - profile.cost, tokenizer, framing)
    beside = policy.whole_prompt_budget - REPLY_PRIMING \
        - _sum_cost(request.instructions, tokenizer)
    points = allowances(beside, policy.prompt_budget)
    window = loop_window(history, costs, ceiling - pinned.cost - profile.cost - reserved,
                         *points, tokenizer)
    if not window.fits and pinned.cost + profile.cost + reserved:
        # Memory gives way before the task does.
        pinned, profile, offered = Packed(), Packed(), ()
        window = loop_window(history, costs, ceiling, *points, tokenizer)
    if not window.fits:
        messages = request.instructions + window.messages + request.current
        return Rewrite(messages=messages, tokens_original=tokens_original,
                       tokens_forwarded=_total(fixed_cost + window.cost, bool(messages)),
                       recent_turns=sum(1 for m in window.messages if m.role == "user"),
                       history_kept=len(window.messages), truncated=0, over_budget=True,
                       exchanges_dropped=window.dropped)
    pinned_ids, pinned_texts = _pins_shown(pinned.items)
    forwarded = {id(m) for m in window.messages}  # verbatim messages are the history's own
    shown = frozenset(i for i, m in zip(request.history_ids[fit.start:], history)
                      if i is not None and id(m) in forwarded) \
        if request.history_ids else frozenset()
    offered = drop_redundant(offered, pinned_ids | shown, (),
                             pinned_texts | shown_texts(window.messages))
    recalled = pack_recalled(offered, min(tail - profile.cost,
                                          ceiling - pinned.cost - profile.cost - window.cost),
                             tokenizer, framing)
    stable = request.instructions + tuple(b for b in (pinned.block,) if b is not None) \
        + window.messages
    messages = stable + tuple(b for b in (profile.block, recalled.block) if b is not None) \
        + request.current
    return _assembled(messages, tokens_original, fixed_cost, window, pinned, Packed(),
                      profile, recalled, stable_messages=len(stable),
                      tool_results_cleared=window.cleared,
                      exchanges_dropped=window.dropped)


def _head_blocks(request: RewriteRequest, room: int, fixed_texts: frozenset[str],
                 tokenizer: Tokenizer, framing: Framing) -> tuple[Packed[PinnedMessage],
                                                                  Packed[str]]:
    """The pinned block (first, within its share; a pin the instructions or the current turn
    show is not repeated) and the summary block (within its share of what the pins leave) of a
    history that does not fit."""
    policy, memory = request.policy, request.memory
    pinned: Packed[PinnedMessage] = Packed()
    if memory.pinned:
        pinned = pack_pinned(not_shown(memory.pinned, frozenset(), fixed_texts),
                             share(policy.pinned_share, room), tokenizer, framing)
    summary = pack_summary(memory.summary_chunks,
                           min(share(policy.summary_share, room), room - pinned.cost),
                           tokenizer, framing)
    return pinned, summary


def _without_shown_pins(request: RewriteRequest, window: Window,
                        pinned: Packed[PinnedMessage], tokenizer: Tokenizer,
                        framing: Framing) -> Packed[PinnedMessage]:
    """The pinned block less the pins the window shows whole (a shortened copy does not count:
    a pin is never shown shortened)."""
    if not pinned.items:
        return pinned
    kept = not_shown(pinned.items, *_shown_whole(request, window))
    return pack_pinned(kept, pinned.cost, tokenizer, framing) \
        if len(kept) < len(pinned.items) else pinned


def _stepped(request: RewriteRequest, costs: tuple[int, ...], room: int,
             pinned: Packed[PinnedMessage], summary: Packed[str], tokens_original: int,
             fixed_cost: int, tokenizer: Tokenizer, framing: Framing) -> Rewrite:
    """The stepped assembly of a history that does not fit (`policy.assembly`): instructions,
    the pinned and summary blocks, a verbatim window whose start moves only in steps
    (gateway/core/context/steps.py), then the profile and recalled blocks and the current
    turn — everything before the tail repeats the previous request's prompt between steps.
    Messages in the window are cut to one length fixed by the budget, never fitted to this
    request (a fitted length would change the prefix); when no step's window fits what is
    left, the newest turns that fit are forwarded (the rolling window, one request)."""
    policy = request.policy
    left = room - pinned.cost - summary.cost
    length = policy.truncate_message_tokens
    if policy.recent_share > 0:
        length = min(length, max(1, share(policy.recent_share, policy.prompt_budget)))
    window = _stepped_window(request, costs, left, length,
                             _unsummarized(request, summary.block is not None), tokenizer)
    pinned = _without_shown_pins(request, window, pinned, tokenizer, framing)
    left = room - pinned.cost - summary.cost - window.cost
    profile = pack_profile(request.memory.profile, min(share(policy.profile_share, room), left),
                           tokenizer, framing)
    left -= profile.cost
    pinned_ids, pinned_texts = _pins_shown(pinned.items)
    offered = drop_redundant(recalled_lines(request.memory.recalled, tokenizer),
                             pinned_ids | _window_ids(request, window), summary.items,
                             pinned_texts | shown_texts(window.messages))
    recalled = pack_recalled(offered, min(share(policy.recall_share, room), left), tokenizer,
                             framing, large_last=_large_last(request))
    stable = request.instructions + tuple(
        b for b in (pinned.block, summary.block) if b is not None) + window.messages
    messages = stable + tuple(b for b in (profile.block, recalled.block) if b is not None) \
        + request.current
    return _assembled(messages, tokens_original, fixed_cost, window, pinned, summary, profile,
                      recalled, stable_messages=len(stable))


def _assembled(messages: tuple[Message, ...], tokens_original: int, fixed_cost: int,
               window: Window, pinned: Packed[PinnedMessage], summary: Packed[str],
               profile: Packed[str], recalled: Packed[Recollection],
               **extra: Any) -> Rewrite:
    """The Rewrite of a history that does not fit, from its window and blocks (`extra`: the
    assembly's own fields)."""
    blocks: tuple[tuple[BlockName, Message | None], ...] = (
        ("pinned", pinned.block), ("summary", summary.block), ("profile", profile.block),
        ("recalled", recalled.block))
    memory_cost = pinned.cost + summary.cost + profile.cost + recalled.cost
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
        **_pinned_fields(pinned),
        **extra,
    )


def _stepped_window(request: RewriteRequest, costs: tuple[int, ...], room: int, length: int,
                    begin: int, tokenizer: Tokenizer) -> Window:
    """The history from the first step whose window (messages cut to `length`) fits `room`
    and the policy's allowance; else the newest turns that fit the allowance."""
    policy = request.policy
    history = request.history
    allowance = min(room, share(policy.window_share, policy.prompt_budget))
    estimates = estimated_costs(costs, length)
    step = max(1, allowance // 2)
    served = served_start(history, begin, policy.served_turns)
    for point in window_starts(history, estimates, allowance, step, begin):
        if point > served:
            # Too few turns since the step for the continuity rule: start at the last step
            # point before the served turns (the newest served turn, if that does not fit).
            earlier = [p for p in step_points(history, estimates, step) if begin <= p <= served]
            starts = ([earlier[-1]] if earlier else []) + [served]
        else:
            starts = [point]
        for start in starts:
            window = window_from(history, costs, start, length, tokenizer)
            if window.cost <= room:
                return window
        if point > served:
            break
    rolling = replace(policy, truncate_message_tokens=length, max_recent_turns=len(history))
    return recent_window(history[begin:], costs[begin:], allowance, rolling, tokenizer)


def _whole_history(request: RewriteRequest, history: tuple[Message, ...], left: int,
                   tokens_original: int, fixed_cost: int, tokenizer: Tokenizer,
                   pinned: Packed[PinnedMessage], framing: Framing) -> Rewrite:
    """The history fits: all of it (`history`: what of it can be forwarded), verbatim, plus
    only what memory knows from outside it — the pins it does not show (`pinned`, packed by
    the caller), the profile and recalled items not all of whose sources it holds (facts
    learned elsewhere, other conversations) — in the room `left`. Never a summary of turns it
    shows, so the prompt costs at most the conversation plus that outside memory. The history
    is the stable prefix: the next request repeats it (append-only)."""
    left -= pinned.cost
    # A profile learned from this conversation alone says again what the history says.
    profile = pack_profile(request.memory.profile, left, tokenizer, framing) \
        if request.memory.profile_elsewhere else Packed()
    ids = frozenset(i for i in request.history_ids if i is not None)
    # A fact learned from turns shown here says again what they say.
    outside = tuple(r for r in request.memory.recalled
                    if not (r.kind == "fact" and r.source_ids and ids.issuperset(r.source_ids)))
    pinned_ids, pinned_texts = _pins_shown(pinned.items)
    offered = drop_redundant(recalled_lines(outside, tokenizer), ids | pinned_ids, (),
                             shown_texts(history) | pinned_texts)
    recalled = pack_recalled(offered, left - profile.cost, tokenizer, framing)
    blocks: tuple[tuple[BlockName, Message | None], ...] = (
        ("pinned", pinned.block), ("profile", profile.block), ("recalled", recalled.block))
    # The profile changes as memory learns: after the history, so it never breaks the cached
    # prefix that the whole history is.
    stable = request.instructions + tuple(b for b in (pinned.block,) if b is not None) + history
    messages = stable + tuple(b for b in (profile.block, recalled.block) if b is not None) \
        + request.current
    return Rewrite(
        messages=messages,
        tokens_original=tokens_original,
        tokens_forwarded=_total(fixed_cost + pinned.cost + profile.cost + recalled.cost,
                                bool(messages)),
        recent_turns=sum(1 for m in history if m.role == "user"),
        history_kept=len(history),
        truncated=0,
        over_budget=False,
        whole=True,
        memory_blocks=tuple(name for name, block in blocks if block is not None),
        recalled=len(recalled.items),
        recalled_ids=tuple(r.id for r in recalled.items),
        profile_tokens=profile.cost,
        recalled_tokens=recalled.cost,
        **_pinned_fields(pinned),
        # Nothing after the history: the next request repeats the current turn too.
        stable_messages=len(messages) if len(messages) == len(stable) + len(request.current)
        else len(stable),
    )


def _pins_shown(pins: Sequence[PinnedMessage]) -> tuple[frozenset[str], frozenset[str]]:
    """(ids, one-line texts) of the pins in the block: recalled items saying the same are
    left out."""
    return frozenset(p.id for p in pins), frozenset(t for p in pins if (t := pin_text(p)))


def _pinned_fields(pinned: Packed[PinnedMessage]) -> dict[str, Any]:
    return {"pinned": len(pinned.items), "pinned_ids": tuple(p.id for p in pinned.items),
            "pinned_tokens": pinned.cost}


def _unsummarized(request: RewriteRequest, summary_shown: bool) -> int:
    """Where the history the recent window may draw from starts: after the last summarised
    message when the summary block is shown (and that message is found in this request's
    history — after a fork it may not be), else at its start."""
    boundary = request.memory.summarized_through
    if not summary_shown or boundary is None or boundary not in request.history_ids:
        return 0
    return request.history_ids.index(boundary) + 1


def _shown_whole(request: RewriteRequest,
                 window: Window) -> tuple[frozenset[str], frozenset[str]]:
    """(stored ids, one-line texts) of the window's messages forwarded whole, not shortened."""
    start = len(request.history) - len(window.messages)
    ids = request.history_ids[start:] if request.history_ids else (None,) * len(window.messages)
    whole = [(i, m) for i, m, o in zip(ids, window.messages, request.history[start:]) if m is o]
    return (frozenset(i for i, _ in whole if i is not None),
            shown_texts([m for _, m in whole]))


def _large_last(request: RewriteRequest) -> bool:
    """Whether the stepped assembly's recalled block — the tail the window leaves — tries its
    large items last: unless the message asks what the assistant said
    (`need.asks_what_you_said`), whose long replies are what it wants
    (gateway/core/recall/pages.py; why: docs/decisions.md)."""
    return not asks_what_you_said(_message(request))


def _message(request: RewriteRequest) -> str:
    """What the user says in the current turn (its user messages' text)."""
    return "\n".join(m.text for m in request.current if m.role == "user")


def _window_ids(request: RewriteRequest, window: Window) -> frozenset[str]:
    """Stored ids of the history messages in the window (a suffix of the history)."""
    if not request.history_ids or not window.messages:
        return frozenset()
    kept = request.history_ids[len(request.history) - len(window.messages):]
    return frozenset(i for i in kept if i is not None)


def _sum_cost(messages: Sequence[Message], tokenizer: Tokenizer) -> int:
    return sum(count_message(m, tokenizer) for m in messages)


def _total(message_cost: int, any_messages: bool) -> int:
    """count_messages from the sum of count_message: the priming is paid once, if any."""
    return REPLY_PRIMING + message_cost if any_messages else 0
