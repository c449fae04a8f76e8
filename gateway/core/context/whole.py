"""Whether a history goes upstream whole: the rewrite's first decision
(gateway/core/context/rewrite.py), made from the window, the instructions, the current turn, the
history's costs and the pins — never from what recall found. So it can be made before recall,
and a recall for a history that goes whole need not search the history's own turns: the
rewrite would leave every one of them out as shown.

Invariants (tests/unit/test_whole.py): `goes_whole(request)` is
`rewrite(request).whole` for a request without a brief; with `reserve` at least the cost of a
brief added later, True implies the briefed request goes whole too; pure, no input mutated.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.core.context.blocks import Framing, PinnedMessage, framing_for
from gateway.core.context.packing import Packed, share, shown_texts
from gateway.core.context.pinned import not_shown, pack_pinned
from gateway.core.context.rewrite_request import RewriteRequest
from gateway.core.context.tool_loop import is_tool_loop
from gateway.core.context.window import ANSWER_ROLES
from gateway.core.messages import Message
from gateway.core.text.tokens import REPLY_PRIMING, Tokenizer, count_each, count_message


@dataclass(frozen=True, slots=True)
class Fit:
    """How a history stands against the window."""

    whole: bool
    """All of it that can be forwarded fits, beside the pins it does not show."""
    start: int
    """Where the history that can be forwarded starts (`first_forwardable`)."""
    left: int
    """With `whole`: the room beside the history for memory from outside it (0 otherwise)."""
    pinned: Packed[PinnedMessage]
    """The pins the history does not show, packed within their share of the room."""


def goes_whole(request: RewriteRequest, tokenizer: Tokenizer, *, reserve: int = 0) -> bool:
    """Whether `rewrite(request)` forwards the history whole (its recalled items never change
    that). `reserve`: tokens the instructions may yet grow by (a memory brief made after
    recall: at most its budget) — then True only when the history goes whole with any growth
    up to it, which pins make unknowable (they are packed in the room the growth takes:
    False). A brief the request already has counts as such growth."""
    if request.memory.brief is not None:
        reserve = max(reserve, count_message(request.memory.brief, tokenizer))
    if reserve and request.memory.pinned:
        return False
    costs = request.history_costs
    if costs is None:
        costs = count_each(request.history, tokenizer)
    fixed = request.instructions + request.current
    fixed_cost = sum(count_message(m, tokenizer) for m in fixed) + reserve
    framing = framing_for(m.text for m in request.current if m.role == "user")
    if is_tool_loop(request.history, request.current):
        return loop_fit(request, costs, fixed_cost, tokenizer, framing).whole
    if (REPLY_PRIMING + fixed_cost if fixed or reserve else 0) > request.policy.prompt_budget:
        return False  # over the budget: the instructions and the current turn go alone
    return plain_fit(request, costs, fixed_cost, tokenizer, framing).whole


def plain_fit(request: RewriteRequest, costs: tuple[int, ...], fixed_cost: int,
              tokenizer: Tokenizer, framing: Framing) -> Fit:
    """A conversation's history (no tool loop) against the window, once the instructions and
    the current turn (`fixed_cost`) are within the prompt budget: it goes whole when what of
    it can be forwarded and the pins it does not show fit the window (at least the prompt
    budget). Beside it, memory from outside gets at least what the tail of an assembly over
    the budget would (the room less the window's share) — it does not vanish as the history
    grows past the room — but once there is a history, at most `outside_share` of the room
    (that tail is paid in full every turn)."""
    policy, memory = request.policy, request.memory
    room = policy.prompt_budget - REPLY_PRIMING - fixed_cost
    start = first_forwardable(request.history)
    forwardable = sum(costs[start:])
    pinned: Packed[PinnedMessage] = Packed()
    if memory.pinned:
        ids = frozenset(i for i in request.history_ids if i is not None)
        pinned = pack_pinned(not_shown(memory.pinned, ids, _shown(request, request.history)),
                             share(policy.pinned_share, room), tokenizer, framing)
    whole_room = max(room, policy.whole_prompt_budget - REPLY_PRIMING - fixed_cost)
    if forwardable + pinned.cost > whole_room:
        return Fit(False, start, 0, pinned)
    left = min(whole_room, max(room, forwardable + room - share(policy.window_share, room))) \
        - forwardable
    if request.history:
        left = min(left, pinned.cost + share(policy.outside_share, room))
    return Fit(True, start, left, pinned)


def loop_fit(request: RewriteRequest, costs: tuple[int, ...], fixed_cost: int,
             tokenizer: Tokenizer, framing: Framing) -> Fit:
    """An agent's tool loop against the window: it goes whole when what of it can be
    forwarded and the pins it does not show fit the window; beside it, memory from outside
    gets at most `outside_share` of the compacted room once there is a history."""
    policy, memory = request.policy, request.memory
    start = first_forwardable(request.history)
    history, costs = request.history[start:], costs[start:]
    ceiling = policy.whole_prompt_budget - REPLY_PRIMING - fixed_cost
    room = max(0, policy.prompt_budget - REPLY_PRIMING - fixed_cost)
    pinned: Packed[PinnedMessage] = Packed()
    if memory.pinned:
        ids = frozenset(i for i in request.history_ids if i is not None)
        pinned = pack_pinned(not_shown(memory.pinned, ids, _shown(request, history)),
                             share(policy.pinned_share, room), tokenizer, framing)
    if sum(costs) + pinned.cost > ceiling:
        return Fit(False, start, 0, pinned)
    tail = share(policy.outside_share, room)
    return Fit(True, start, min(ceiling - sum(costs), pinned.cost + (tail if history else room)),
               pinned)


def first_forwardable(history: tuple[Message, ...]) -> int:
    """Where the history that can be forwarded starts: tool/function results at its very start
    answer a call that is not there; they are never forwarded (the provider would reject
    them)."""
    start = 0
    while start < len(history) and history[start].role in ANSWER_ROLES:
        start += 1
    return start


def _shown(request: RewriteRequest, history: tuple[Message, ...]) -> frozenset[str]:
    """The texts before the model besides the pinned block: instructions, current turn,
    `history`."""
    return shown_texts(request.instructions + request.current) | shown_texts(history)
