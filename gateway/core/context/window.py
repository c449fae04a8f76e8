"""The recent window: a contiguous suffix of the history, cut into turns and units, fitted to
a room (the rewrite's over-budget layouts, gateway/core/context/rewrite.py, use it).

A unit is one message with the tool/function results after it (kept or dropped together); a
turn is the units a user message opens. Everything here is pure and looks only at the newest
turns it needs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from gateway.core.context.truncation import cost_as_shortened, shorten
from gateway.core.messages import Message
from gateway.core.policy import ContextPolicy
from gateway.core.text.tokens import Tokenizer

ANSWER_ROLES = frozenset({"tool", "function"})
"""Roles that answer a call: part of the unit the call opens."""
Unit = tuple[Message, ...]
"""Messages kept or dropped together: one message plus the tool results that follow it."""
Span = tuple[int, int]
"""A unit as the (start, end) of its messages in the history."""


@dataclass(frozen=True, slots=True)
class Window:
    messages: tuple[Message, ...] = ()
    cost: int = 0
    truncated: int = 0


def window_from(history: tuple[Message, ...], costs: tuple[int, ...], start: int,
                length: int, tokenizer: Tokenizer) -> Window:
    """The history from `start` on, each message cut to `length`, with its true cost."""
    messages = shorten(history[start:], length, tokenizer)
    cost = cost_as_shortened(messages, history[start:], costs[start:], tokenizer)
    return Window(messages=messages, cost=cost,
                  truncated=sum(1 for m, o in zip(messages, history[start:]) if m is not o))


def served_start(history: tuple[Message, ...], begin: int, turns: int) -> int:
    """Where the newest `turns` user turns of `history[begin:]` start (`begin` if it has
    fewer; the end of the history for none)."""
    if turns <= 0:
        return len(history)
    seen = 0
    for i in range(len(history) - 1, begin - 1, -1):  # newest first: only those turns
        seen += history[i].role == "user"
        if seen == turns:
            return i
    return begin


def recent_window(history: tuple[Message, ...], message_costs: tuple[int, ...], room: int,
                  policy: ContextPolicy, tokenizer: Tokenizer) -> Window:
    """The newest whole turns that fit `room` (at most `max_recent_turns` user turns),
    chronological; stops at the first turn that does not fit. If not even the newest turn
    fits whole, its newest units that fit instead. `message_costs`: count_message of each
    history message. Only the turns looked at are visited, newest first."""
    kept: list[Unit] = []  # newest first
    cost = user_turns = 0
    for turn in turns_newest_first(history):
        is_user_turn = history[turn[0][0]].role == "user"
        if is_user_turn and user_turns >= policy.max_recent_turns:
            break
        shortened = [shorten(history[a:b], policy.truncate_message_tokens, tokenizer) for a, b in turn]
        costs = [cost_as_shortened(unit, history[a:b], message_costs[a:b], tokenizer)
                 for unit, (a, b) in zip(shortened, turn)]
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
    return Window(messages=messages, cost=cost,
                  truncated=sum(1 for m, o in zip(messages, originals) if m is not o))


def fitted_length(history: tuple[Message, ...], message_costs: tuple[int, ...], cap: int,
                  policy: ContextPolicy, tokenizer: Tokenizer) -> int:
    """The longest message length (at most `policy.truncate_message_tokens`) with which the
    newest `policy.served_turns` turns cost at most `cap`, each message shortened to it;
    the policy's when not even 1-token heads fit (then the window keeps what fits of them, as
    it would without this)."""
    limit = policy.truncate_message_tokens
    spans = [span for turn, _ in zip(turns_newest_first(history),
                                     range(max(1, policy.served_turns))) for span in turn]

    def cost(length: int) -> int:
        return sum(cost_as_shortened(shorten(history[a:b], length, tokenizer), history[a:b],
                                     message_costs[a:b], tokenizer) for a, b in spans)

    if not spans or cost(limit) <= cap:
        return limit
    low, high = 1, limit  # cost(high) > cap; find the largest length whose cost fits
    if cost(low) > cap:
        return limit  # nothing to gain by cutting: the window keeps what fits, as before
    while high - low > 1:
        middle = (low + high) // 2
        if cost(middle) <= cap:
            low = middle
        else:
            high = middle
    return low


def turns_newest_first(history: tuple[Message, ...]) -> Iterator[tuple[Span, ...]]:
    """The forwardable history cut into units — each message with the tool/function results
    after it — and the units grouped into turns, each opened by a user message; units before
    the first user message form a turn of their own (it counts as no user turn). Turns come
    newest first, each one's units oldest first; found from the end, so a caller that stops
    early never walks the older history."""
    turn: list[Span] = []  # newest unit first
    end = len(history)
    for i in range(len(history) - 1, -1, -1):
        if history[i].role in ANSWER_ROLES:
            continue  # a result: part of the unit its call opens
        turn.append((i, end))
        end = i
        if history[i].role == "user":
            yield tuple(reversed(turn))
            turn = []
    if turn:
        yield tuple(reversed(turn))
