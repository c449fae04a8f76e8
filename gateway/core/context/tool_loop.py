"""Agent tool loops: their exchanges, and how a loop beyond the window is compacted.

An agent's conversation (Claude Code, an OpenAI tool loop) is a task followed by many loop
steps: an assistant message that calls tools, the tool results that answer it, and any text
the client sends after the results (Claude Code's `<system-reminder>` blocks travel in the
same Anthropic user message as the results). The unit kept or dropped here is the *exchange*:
one message plus the results and the attached text after it. An exchange never splits a call
from its results, and attached text belongs to the step, not a new user turn.

Beyond the window a loop is compacted cheapest loss first, in steps:

    [task] [older exchanges, results cleared] [newest exchanges, verbatim] [newest exchange]

- the *task* — the conversation's first user message — is always kept whole, and so is every
  later user instruction (a user message that is not attached to tool results) that is not
  dropped with its exchange (below);
- exchanges before the *verbatim point* have their tool results *cleared*: each result becomes
  a one-line placeholder that says which tool, which call id, how large, and that the gateway
  cleared it; their thinking blocks are left out (the provider keeps only the last assistant
  message's thinking), and so are the client's reminders among the attached text (a text part
  wrapped whole in `<system-reminder>` tags, Claude Code's convention: the client sends them
  afresh); their calls, their text and any other attached text (what the user typed while the
  tools ran) stay;
- cleared exchanges before the *drop point* are dropped; the newest user instructions among
  them stay, attached ones included, as far as they fit the cleared allowance (an agent has a
  few; a chat that calls a tool now and then has many);
- both points move only in steps fixed by the history alone (`steps.step_points` over
  exchange starts), so consecutive requests share their prefix until a point jumps.

Invariants (tests/unit/test_tool_loop.py): pure; inputs never altered; the forwarded history
starts with a user message, never separates a call from its results and never holds a result
without its call; the newest exchange and the task are never cleared or shortened; what is
kept verbatim is byte-identical to the input (thinking blocks and signatures included).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import Sequence

from gateway.core.context.window import ANSWER_ROLES
from gateway.core.messages import Message, collapsed, thaw
from gateway.core.text.tokens import Tokenizer, count_message

CLEARED_SHARE = 0.25
"""At most this share of the compacted prompt budget for cleared exchanges; older ones are
dropped. The verbatim exchanges get half of what the window leaves beside them (`allowances`):
their point jumps when they outgrow it, so the newest exchange always has the other half."""
PLACEHOLDER = "[tool result cleared by the gateway: {name}, call {id}, {size:,} characters]"
"""What a cleared tool result says instead of its output."""
REMINDER = re.compile(r"\s*<system-reminder>.*</system-reminder>\s*", re.DOTALL)
"""A text part that is a client's reminder, whole."""

Span = tuple[int, int]


def attached(messages: Sequence[Message]) -> tuple[bool, ...]:
    """For each message: whether it is a user message attached to the tool results before it
    (text a client sends with the results: it belongs to that loop step)."""
    out: list[bool] = []
    for i, message in enumerate(messages):
        out.append(message.role == "user" and i > 0
                   and (messages[i - 1].role in ANSWER_ROLES or out[i - 1]))
    return tuple(out)


def exchanges(messages: Sequence[Message]) -> tuple[Span, ...]:
    """`messages` cut into exchanges: each message that is neither a result nor attached text
    opens one, and the results and attached text after it belong to it. Leading results or
    attached text (their call is not there) form no exchange and are left out."""
    joined = attached(messages)
    starts = [i for i, m in enumerate(messages) if m.role not in ANSWER_ROLES and not joined[i]]
    return tuple(zip(starts, [*starts[1:], len(messages)]))


def is_tool_loop(history: Sequence[Message], current: Sequence[Message]) -> bool:
    """Whether the conversation is an agent's: its assistant calls tools at least as often as
    its user gives instructions (a chat that calls a tool now and then is laid out as a chat,
    with its memory blocks)."""
    messages = (*history, *current)
    calls = sum(1 for m in messages if m.role == "assistant" and m.get("tool_calls"))
    if not calls:
        return False
    joined = attached(messages)
    said = sum(1 for m, j in zip(messages, joined) if m.role == "user" and not j)
    return calls >= said


def split_loop(conversation: Sequence[Message]) -> tuple[tuple[Message, ...],
                                                          tuple[Message, ...]]:
    """(history, current) of a conversation without instructions. The current turn starts at
    the last user instruction (a user message not attached to tool results) — unless the
    conversation ends in a loop step after it, an assistant message that called tools and the
    results (and attached text) that answer it: then that newest exchange is the current
    turn, and the instruction and the loop's earlier steps are history. Without any user
    message the whole conversation is the current turn."""
    messages = tuple(conversation)
    joined = attached(messages)
    instruction = next((i for i in range(len(messages) - 1, -1, -1)
                        if messages[i].role == "user" and not joined[i]), None)
    if instruction is None:
        return (), messages
    spans = exchanges(messages[instruction:])
    last = spans[-1][0] + instruction if spans else instruction
    newest = messages[last]
    if last > instruction and newest.role == "assistant" and newest.get("tool_calls") \
            and last + 1 < len(messages):
        return messages[:last], messages[last:]
    return messages[:instruction], messages[instruction:]


def instruction_text(conversation: Sequence[Message]) -> str:
    """The text of the last user instruction (not attached to tool results): what a loop
    step is working on, and what recall searches for."""
    messages = tuple(conversation)
    joined = attached(messages)
    return next((messages[i].text for i in range(len(messages) - 1, -1, -1)
                 if messages[i].role == "user" and not joined[i]), "")


@dataclass(frozen=True, slots=True)
class LoopWindow:
    """The history of a tool loop as forwarded."""

    messages: tuple[Message, ...] = ()
    cost: int = 0
    cleared: int = 0
    """Tool results forwarded as placeholders."""
    truncated: int = 0
    """Messages forwarded shortened: none (a loop's messages go whole or cleared)."""
    dropped: int = 0
    """Exchanges left out."""
    fits: bool = True
    """Whether it fits the room it was given (False: the task and the instructions alone)."""


@dataclass(frozen=True, slots=True)
class _Exchange:
    """One exchange in its three forms, with their costs."""

    verbatim: tuple[Message, ...]
    cost: int
    cleared: tuple[Message, ...]
    cleared_cost: int
    dropped: tuple[Message, ...]
    """What stays of it when it is dropped: the user's instructions."""
    dropped_cost: int


def allowances(window: int, compacted: int) -> tuple[int, int]:
    """(verbatim, cleared) allowances of a loop whose prompt may cost `window` tokens beside
    the client's instructions, and whose compacted prompt budget is `compacted`."""
    cleared = max(0, int(CLEARED_SHARE * compacted))
    return max(0, window - cleared) // 2, cleared


def loop_window(history: Sequence[Message], costs: Sequence[int], room: int, verbatim: int,
                cleared: int, tokenizer: Tokenizer) -> LoopWindow:
    """The compacted history of a tool loop that fits `room`: the task and the user
    instructions whole, exchanges before the verbatim point with their results cleared,
    those before the drop point left out (see the module docstring). `verbatim` and
    `cleared`: the allowances that fix the points (the verbatim exchanges take at most
    `verbatim` tokens, the cleared ones `cleared`); when the result does not fit `room`, the
    points move further for this request; when not even the task and the instructions fit
    beside what is kept of the rest, they alone (`LoopWindow.fits` false)."""
    history = tuple(history)
    # The task opens the compacted history: what came before it (a greeting) is left out.
    first = next((i for i, m in enumerate(history) if m.role == "user"), None)
    task = (first, first + 1) if first is not None else None
    after = first + 1 if first is not None else 0
    items = [_exchange(history, costs, (a + after, b + after), tokenizer)
             for a, b in exchanges(history[after:])]
    task_cost = costs[first] if first is not None else 0
    keep = _point([x.cost for x in items], verbatim)
    drop = _point([x.cleared_cost for x in items[:keep]], cleared)
    told = _told(items, drop, cleared)
    window = _assemble(history, task, task_cost, items, drop, keep, told)
    if window.cost <= room:
        return window
    # Too large beside this request's newest exchange: for this request only, clear more
    # (each further exchange, priced from running sums), then drop more (in steps of half the
    # cleared allowance, as the drop point moves).
    head = task_cost + sum(x.dropped_cost for k, x in enumerate(items) if k in told)
    middle = sum(x.cleared_cost for x in items[drop:keep])
    tail = sum(x.cost for x in items[keep:])
    while keep < len(items) and head + middle + tail > room:
        middle += items[keep].cleared_cost
        tail -= items[keep].cost
        keep += 1
    if head + middle + tail > room:
        totals = (0, *accumulate(x.cleared_cost for x in items))
        step = max(1, cleared // 2)
        for point in (*range(drop + 1, keep), keep):
            if point < keep and totals[point] - totals[drop] < step:
                continue
            drop, told = point, _told(items, point, cleared)
            head = task_cost + sum(x.dropped_cost for k, x in enumerate(items) if k in told)
            if head + totals[keep] - totals[drop] <= room:
                break
    window = _assemble(history, task, task_cost, items, drop, keep, told)
    return replace(window, fits=window.cost <= room)


def _told(items: Sequence[_Exchange], drop: int, allowance: int) -> frozenset[int]:
    """The dropped exchanges (before `drop`) whose instructions stay: the newest whose
    instructions together cost at most `allowance` (a chat with a few tool calls has many)."""
    told: set[int] = set()
    left = allowance
    for k in range(drop - 1, -1, -1):
        if items[k].dropped_cost and items[k].dropped_cost <= left:
            told.add(k)
            left -= items[k].dropped_cost
    return frozenset(told)


def _exchange(history: tuple[Message, ...], costs: Sequence[int], span: Span,
              tokenizer: Tokenizer) -> _Exchange:
    a, b = span
    verbatim = history[a:b]
    cost = sum(costs[a:b])
    if verbatim[0].role == "user":  # an instruction: never cleared nor dropped
        return _Exchange(verbatim, cost, verbatim, cost, verbatim, cost)
    known = dict(zip(map(id, verbatim), costs[a:b]))

    def priced(messages: tuple[Message, ...]) -> int:
        return sum(known[id(m)] if id(m) in known else count_message(m, tokenizer)
                   for m in messages)

    cleared, kept = cleared_exchange(verbatim), instructions(verbatim)
    return _Exchange(verbatim, cost, cleared, priced(cleared), kept, priced(kept))


def cleared_exchange(exchange: Sequence[Message]) -> tuple[Message, ...]:
    """An exchange with its tool results cleared to placeholders, the call's thinking blocks
    and the client's reminders left out, the rest of the attached text kept (`instructions`);
    unchanged messages are the same objects."""
    call = exchange[0]
    names = {c["id"]: (c.get("function") or {}).get("name") or "tool"
             for c in call.get("tool_calls") or [] if isinstance(c, dict) and "id" in c}
    out = [_without_thinking(call)]
    for message in exchange[1:]:
        if message.role not in ANSWER_ROLES:
            break
        call_id = message.get("tool_call_id") or ""
        name = names.get(call_id) or message.get("name") or "tool"
        out.append(message.with_content(PLACEHOLDER.format(name=name, id=call_id or "?",
                                                           size=len(message.text))))
    return (*out, *instructions(exchange))


def instructions(exchange: Sequence[Message]) -> tuple[Message, ...]:
    """The attached text of an exchange without the client's reminders: what the user said
    with the results (the same objects where nothing is left out)."""
    out = []
    for message in exchange[1:]:
        if message.role != "user":
            continue
        if isinstance(message.content, str):
            if not REMINDER.fullmatch(message.content):
                out.append(message)
            continue
        parts = [p for p in thaw(message.content or ())
                 if not (isinstance(p, dict) and isinstance(p.get("text"), str)
                         and REMINDER.fullmatch(p["text"]))]
        if len(parts) == len(message.content or ()):
            out.append(message)
        elif parts:
            out.append(message.with_content(collapsed(parts)))
    return tuple(out)


def _without_thinking(message: Message) -> Message:
    if not message.get("thinking_blocks"):
        return message
    data = message.to_openai()
    data.pop("thinking_blocks")
    return Message.from_openai(data)


def _assemble(history: tuple[Message, ...], task: Span | None, task_cost: int,
              items: list[_Exchange], drop: int, keep: int, told: frozenset[int]
              ) -> LoopWindow:
    messages: list[Message] = list(history[task[0]:task[1]]) if task else []
    cost, cleared, dropped = task_cost, 0, 0
    for k, item in enumerate(items):
        if k < drop:
            if k in told:
                messages.extend(item.dropped)
                cost += item.dropped_cost
            if k not in told or item.dropped is not item.verbatim:
                dropped += 1
        elif k < keep:
            messages.extend(item.cleared)
            cost += item.cleared_cost
            cleared += sum(1 for m in item.cleared if m.role in ANSWER_ROLES)
        else:
            messages.extend(item.verbatim)
            cost += item.cost
    return LoopWindow(tuple(messages), cost, cleared=cleared, dropped=dropped)


def _point(costs: Sequence[int], allowance: int) -> int:
    """The first step point (an exchange index; step points as `steps.step_points`: the first
    exchange, then each first one at least half the allowance after the last point) from which
    the rest costs at most `allowance`; past the end when none does. Appending exchanges never
    moves an earlier point, so the point stays until the rest outgrows the allowance."""
    step = max(1, allowance // 2)
    totals = (0, *accumulate(costs))
    total = totals[-1]
    last: int | None = None
    for k in range(len(costs)):
        if last is None or totals[k] - totals[last] >= step:
            last = k
            if total - totals[k] <= allowance:
                return k
    return len(costs)
