"""Pinned messages: what the user or the application marked important, and how it is shown.

A message is pinned by the client (`"x_gateway_pin": true` on the message, consumed at
parsing and never forwarded), through the memory API (a stored message, by id), or by the
importance rule of the memory worker (gateway/core/memory/importance.py). Pins never age out.

The pinned block is ONE `system` message placed right after the client's instructions (the
most stable part of the prompt: upstream prompt caches keep hitting until a pin is added).
It has up to two sections:

- `<pinned>`: messages of role user/system/developer pinned by the client or the API — rules
  and facts the user or the application asked to be kept, presented as standing instructions
  (below the client's own system prompt, which the header says wins);
- `<noted>`: everything else — messages the importance rule picked (a user's own words, which
  may be an attempt at prompt injection) and assistant/tool messages (text a model or a tool
  wrote) — presented like other memory: background data, not instructions.

Both headers are short and in the conversation's language (`Framing.pinned` / `.noted` of
gateway/core/context/blocks.py, chosen by the current message like the other blocks'): paid on
every request that shows a pin, where a small budget cannot afford a long English preamble.

Invariants (tests/unit/test_pinned.py, tests/unit/test_rewrite_properties.py):
- an item is shown whole or not at all (never shortened): one line, newlines made spaces, its
  role named unless it is the user's;
- packing takes the rules first, then the noted items, each group oldest pin first, skipping
  an item that does not fit (a later, smaller one may); so a new pin never displaces an older
  one, and the block's prefix stays the same as pins are added;
- no item can open or close either section: both tags are escaped in every item;
- priced by arithmetic (a block is its frames plus its lines, see gateway/core/context/packing.py),
  measured once as rendered; if the measure differs, packed by the definition instead.
"""

from __future__ import annotations

from typing import AbstractSet, Sequence

from gateway.core.context.blocks import (
    BLOCK_ROLE,
    ENGLISH,
    Framing,
    PinnedMessage,
    escape_tag,
    one_line,
)
from gateway.core.messages import Message, chain, chain_id
from gateway.core.context.packing import Packed
from gateway.core.text.tokens import Tokenizer, count_message
from gateway.core.transcript import Reconciliation

MARKER = "x_gateway_pin"
"""The message field a client sets to `true` to pin the message (see gateway/core/one_shot.py
for why a field on the message)."""

RULE_ROLES = frozenset({"user", "system", "developer"})
RULE_SOURCES = frozenset({"client", "api"})

PINNED_HEADER, NOTED_HEADER = ENGLISH.pinned, ENGLISH.noted
PINNED_TAG, NOTED_TAG = "pinned", "noted"


def is_rule(pin: PinnedMessage) -> bool:
    """Shown as a rule to follow: a user/system/developer message the client or the API
    pinned. Anything else is only noted (untrusted, like recalled memory)."""
    return pin.source in RULE_SOURCES and pin.message.role in RULE_ROLES


def pin_text(pin: PinnedMessage) -> str:
    """What the pin says, on one line (blank for a message without text)."""
    return one_line(pin.message.text)


def pin_line(pin: PinnedMessage) -> str:
    """The pin's line in its section, escaped (no newline)."""
    role = pin.message.role
    text = pin_text(pin) if role == "user" else f"{role}: {pin_text(pin)}"
    return escape_tag(escape_tag(f"- {text}", PINNED_TAG), NOTED_TAG)


def in_packing_order(pins: Sequence[PinnedMessage]) -> tuple[PinnedMessage, ...]:
    """Rules first, then noted items; each group oldest pin first (ties by id); blank ones
    left out, and so is a pin saying what one before it says (the same words pinned twice,
    from two turns)."""
    ordered = sorted((p for p in pins if pin_text(p)),
                     key=lambda p: (not is_rule(p), p.pinned_at, p.id))
    seen: set[str] = set()
    out = []
    for p in ordered:
        if (text := pin_text(p)) not in seen:
            seen.add(text)
            out.append(p)
    return tuple(out)


def render_pinned(pins: Sequence[PinnedMessage],
                  framing: Framing = ENGLISH) -> Message | None:
    """The pinned block of `pins`, shown in packing order, its headers in `framing`'s
    language; None when none has text."""
    ordered = in_packing_order(pins)
    rules = [pin_line(p) for p in ordered if is_rule(p)]
    noted = [pin_line(p) for p in ordered if not is_rule(p)]
    sections = [_section(header, tag, lines) for header, tag, lines in (
        (framing.pinned, PINNED_TAG, rules), (framing.noted, NOTED_TAG, noted)) if lines]
    return Message.of(BLOCK_ROLE, "\n".join(sections)) if sections else None


def _section(header: str, tag: str, lines: Sequence[str]) -> str:
    return f"{header}\n<{tag}>\n" + "".join(line + "\n" for line in lines) + f"</{tag}>"


def pack_pinned(pins: Sequence[PinnedMessage], limit: int, tokenizer: Tokenizer,
                framing: Framing = ENGLISH) -> Packed[PinnedMessage]:
    """In packing order, each pin with which the block (headers in `framing`'s language)
    still fits `limit` (see the module docstring); the items come back in the order shown."""
    ordered = in_packing_order(pins)
    if not ordered:
        return Packed()
    rules_open = count_message(Message(BLOCK_ROLE, f"{framing.pinned}\n<{PINNED_TAG}>\n"),
                               tokenizer)
    noted_open = count_message(Message(BLOCK_ROLE, f"{framing.noted}\n<{NOTED_TAG}>\n"),
                               tokenizer)
    rules_close = tokenizer.count(f"</{PINNED_TAG}>")
    noted_close = tokenizer.count(f"</{NOTED_TAG}>")
    between = tokenizer.count(f"</{PINNED_TAG}>\n{framing.noted}\n<{NOTED_TAG}>\n")

    def price(rules: int, noted: int, has_rules: bool, has_noted: bool) -> int:
        if has_rules and has_noted:
            return rules_open + rules + between + noted + noted_close
        if has_rules:
            return rules_open + rules + rules_close
        return noted_open + noted + noted_close if has_noted else 0

    chosen: list[PinnedMessage] = []
    rules = noted = 0
    has_rules = has_noted = False
    for pin in ordered:
        cost = tokenizer.count(pin_line(pin) + "\n")
        if is_rule(pin):
            more = price(rules + cost, noted, True, has_noted)
        else:
            more = price(rules, noted + cost, has_rules, True)
        if more <= limit:
            chosen.append(pin)
            if is_rule(pin):
                rules, has_rules = rules + cost, True
            else:
                noted, has_noted = noted + cost, True
    if not chosen:
        return Packed()
    block = render_pinned(chosen, framing)
    assert block is not None
    total = price(rules, noted, has_rules, has_noted)
    if count_message(block, tokenizer) != total:
        return _pack_by_measure(ordered, limit, tokenizer, framing)
    return Packed(block, total, tuple(chosen))


def _pack_by_measure(ordered: tuple[PinnedMessage, ...], limit: int, tokenizer: Tokenizer,
                     framing: Framing) -> Packed[PinnedMessage]:
    """The definition of `pack_pinned`: the block rendered and measured for every candidate."""
    kept: list[PinnedMessage] = []
    packed: Packed[PinnedMessage] = Packed()
    for pin in ordered:
        block = render_pinned(kept + [pin], framing)
        if block is not None and (cost := count_message(block, tokenizer)) <= limit:
            kept.append(pin)
            packed = Packed(block, cost, in_packing_order(kept))
    return packed


def not_shown(pins: Sequence[PinnedMessage], ids: frozenset[str],
              texts: frozenset[str]) -> tuple[PinnedMessage, ...]:
    """The pins not already before the model: neither their id is one of `ids` (stored
    messages shown) nor their one-line text one of `texts` (messages shown, by text — a
    message the client sends again, or a pin whose id could not be known in advance)."""
    return tuple(p for p in pins if p.id not in ids and pin_text(p) not in texts)


def marked_pins(messages: Sequence[Message], marked: AbstractSet[int],
                reconciliation: Reconciliation, pinned_at: float) -> tuple[PinnedMessage, ...]:
    """The pins a client's markers make: `messages` as the client sent them (the markers
    removed), `marked` their indexes, `reconciliation` of their non-instruction messages.

    A pin is keyed by its message's stored id: known for a message already stored; for a new
    one, the id the recorder will give it — chained after the message before it, as
    `apply_turn` does. (A stateful client's turn lands after whatever the transcript ends
    with when it is applied: should another turn land first, the id differs and the pin still
    shows its message; it is then recognised in the window by its text only.) An instruction
    is never stored: its id is the one it would have at the start of a transcript."""
    if not marked:
        return ()
    conversation, ids, new = (reconciliation.conversation, reconciliation.conversation_ids,
                              reconciliation.new)
    incoming = [i for i, m in enumerate(messages) if not m.is_instruction]
    offset = len(conversation) - len(incoming)
    first_new = len(conversation) - len(new)
    parent = ids[first_new - 1] if 0 < first_new <= len(ids) else None
    predicted = [s.id for s in chain(parent, tuple(new))]
    place = {i: offset + j for j, i in enumerate(incoming)}
    pins = []
    for i in sorted(marked):
        message = messages[i]
        if message.is_instruction:
            pins.append(PinnedMessage(chain_id(None, message), message, "client", pinned_at))
            continue
        at = place[i]
        known = ids[at] if at < len(ids) else None
        if known is None and at >= first_new:
            known = predicted[at - first_new]
        if known is not None:
            pins.append(PinnedMessage(known, message, "client", pinned_at))
    return tuple(pins)
