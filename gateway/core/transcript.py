"""Reconciling what a client sends with the stored transcript, and applying recorded turns.

Two kinds of client must both work:
stateless clients resend the whole history each call, stateful clients send only what is new.
`reconcile` works out, for one request, the conversation the model should see and which
incoming messages are new. `apply_turn` is what the recorder does with a recorded turn: append
it, skip what is already stored (ids are chained hashes, so a retried job is a no-op), or —
when the client changed an earlier turn — start a new branch where it diverged, keeping the old
branch rather than overwriting it. Both are pure; the store performs the edit they describe.

A long conversation's oldest messages may be archived (gateway/store/archive.py): the stored
transcript then starts at a message whose parent is not None. A stateless client resending its
whole history is aligned by the chained id of that first message (the archived part before it
is the client's own resend, not new); a history that does not hold it differs inside the
archived part, which is never rewritten: its version is what the model sees for this request,
and only its current turn is recorded, appended to the active branch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Sequence

from gateway.core.messages import Message, StoredMessage, chain, chain_id
from gateway.core.spend import TurnUsage

Key = tuple[Any, ...]
# How a request related to the stored transcript; logged, and used by tests.
Kind = Literal["new", "stateless", "stateful", "fork", "regenerate"]


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One request's contribution to a transcript: the new messages plus the reply.

    mode "after": the messages follow the stored message `parent_id` (None: the very start);
    what is already stored there is skipped, a difference starts a new branch.
    mode "append": the messages go after whatever the transcript ends with when the record is
    applied — how a stateful client's concurrent messages all land.
    """

    mode: Literal["after", "append"]
    parent_id: str | None
    messages: tuple[Message, ...]
    created_at: float = 0.0
    request_id: str = ""
    incomplete_reply: bool = False
    usage: TurnUsage | None = None
    """What the request cost (tokens, spend), added to the usage counters when the turn is
    applied — exactly once, with the turn."""


@dataclass(frozen=True, slots=True)
class Reconciliation:
    kind: Kind
    conversation: tuple[Message, ...]
    """Every non-instruction message this request sees, oldest first, ending with the client's."""
    new: tuple[Message, ...]
    """Incoming messages not stored yet (the reply is added to these when recording)."""
    mode: Literal["after", "append"]
    parent_id: str | None
    conversation_ids: tuple[str | None, ...] = ()
    """The stored id of each message of `conversation` (None where not stored yet)."""

    def record(self, reply: Sequence[Message], *, created_at: float = 0.0, request_id: str = "",
               incomplete_reply: bool = False, usage: TurnUsage | None = None) -> TurnRecord:
        return TurnRecord(mode=self.mode, parent_id=self.parent_id,
                          messages=tuple(self.new) + tuple(reply), created_at=created_at,
                          request_id=request_id, incomplete_reply=incomplete_reply, usage=usage)


def _common_prefix(a: Sequence[Key], b: Sequence[Key]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _suffix_overlap(stored: Sequence[Key], incoming: Sequence[Key]) -> int:
    """Largest k with stored[-k:] == incoming[:k] (0 if none)."""
    for k in range(min(len(stored), len(incoming)), 0, -1):
        if tuple(stored[-k:]) == tuple(incoming[:k]):
            return k
    return 0


def reconcile(incoming: Sequence[Message], stored: Sequence[StoredMessage]) -> Reconciliation:
    """Relate the client's non-instruction messages to the stored transcript (active branch)."""
    return _reconcile(tuple(incoming), stored, align=True)


def _reconcile(incoming: tuple[Message, ...], stored: Sequence[StoredMessage], *,
               align: bool) -> Reconciliation:
    """`reconcile`; `align`: look for the transcript's archived start in `incoming`."""
    sends_history = any(m.role == "assistant" for m in incoming)
    if not stored:
        # Only a client that sends history pins its messages to the start: concurrent first
        # messages of a stateful client must all land, not fork each other away.
        return Reconciliation("new", incoming, incoming, "after" if sends_history else "append",
                              None, _unknown(incoming))
    archived = stored[0].parent_id is not None
    if archived and sends_history and align:
        start = _archived_prefix(incoming, stored[0].id)
        if start is not None:
            return _after_archive(incoming, start,
                                  _reconcile(incoming[start:], stored, align=False))
    known = tuple(s.message for s in stored)
    ids = tuple(s.id for s in stored)
    # Messages are compared by what they say (`Message.key`), not by their encoding.
    incoming_keys = [m.key() for m in incoming]
    known_keys = [m.key() for m in known]

    p = _common_prefix(incoming_keys, known_keys)
    # Starting at the transcript's start means resending history — unless the client sends no
    # assistant message and stops short: then it is a stateful client whose new message
    # happens to equal the first stored one ("hi" again).
    if p and (p == len(known) or sends_history):
        parent = stored[p - 1].id
        if p == len(known):
            kind: Kind = "stateless"
        elif p == len(incoming):
            kind = "regenerate"  # it resent a prefix: the reply it asks for starts a branch
        else:
            kind = "fork"  # it changed a later turn: its version wins, the old one is kept
        return Reconciliation(kind, incoming, incoming[p:], "after", parent,
                              ids[:p] + _unknown(incoming[p:]))

    k = _suffix_overlap(known_keys, incoming_keys)
    if k:
        # A window of recent messages plus what is new: the store supplies the rest.
        return Reconciliation("stateful", known + incoming[k:], incoming[k:], "append", None,
                              ids + _unknown(incoming[k:]))

    if sends_history:
        # The client sends its own history, which differs from the stored one. Align it at the
        # latest place its first message occurs, else at the start; the old branch is kept.
        for j in range(len(known) - 1, -1, -1):
            if known_keys[j] == incoming_keys[0]:
                n = _common_prefix(incoming_keys, known_keys[j:])
                return Reconciliation("fork", known[:j] + incoming, incoming[n:], "after",
                                      stored[j + n - 1].id, ids[:j + n] + _unknown(incoming[n:]))
        if archived:
            # It differs inside the archived part (see the module docstring): no branch can
            # start there; its current turn goes after the active branch.
            current = _current_turn(incoming)
            return Reconciliation("fork", incoming, current, "append", None, _unknown(incoming))
        return Reconciliation("fork", incoming, incoming, "after", None, _unknown(incoming))

    # Only new user/tool messages: a stateful client.
    return Reconciliation("stateful", known + incoming, incoming, "append", None,
                          ids + _unknown(incoming))


def _unknown(messages: Sequence[Message]) -> tuple[None, ...]:
    return (None,) * len(messages)


def _archived_prefix(incoming: Sequence[Message], first_id: str) -> int | None:
    """The index in `incoming` of the message whose chained id (from the start) is
    `first_id` — the stored transcript's first message, archived messages before it — if any."""
    parent = None
    for i, message in enumerate(incoming):
        parent = chain_id(parent, message)
        if parent == first_id:
            return i
    return None


def _after_archive(incoming: tuple[Message, ...], start: int,
                   rest: Reconciliation) -> Reconciliation:
    """`rest` (the reconciliation of `incoming[start:]`) with the archived messages the client
    resent before it put back in front: seen by the model, known by their chained ids."""
    before = incoming[:start]
    return Reconciliation(rest.kind, before + rest.conversation, rest.new, rest.mode,
                          rest.parent_id,
                          tuple(m.id for m in chain(None, before)) + rest.conversation_ids)


def _current_turn(incoming: Sequence[Message]) -> tuple[Message, ...]:
    """The messages after the last assistant message (the whole list if there is none)."""
    last = max((i for i, m in enumerate(incoming) if m.role == "assistant"), default=-1)
    return tuple(incoming[last + 1:])


@dataclass(frozen=True, slots=True)
class TranscriptEdit:
    """Keep the first `keep` stored messages, archive the rest as a branch, then append."""

    keep: int
    append: tuple[StoredMessage, ...]

    def archives(self, length: int) -> bool:
        return self.keep < length

    def applied_to(self, stored: Sequence[StoredMessage]) -> tuple[StoredMessage, ...]:
        return tuple(stored[: self.keep]) + self.append


def apply_turn(stored: Sequence[StoredMessage], record: TurnRecord) -> TranscriptEdit:
    """The edit that records `record` on the transcript `stored` (its active branch)."""
    if record.mode != "append" and stored and record.parent_id is not None \
            and stored[-1].id == record.parent_id:
        # The common case, a turn that follows the branch's last message, without the scans
        # below: they made each pending turn a reader applies cost O(transcript).
        return TranscriptEdit(len(stored), _chained(record.parent_id, record))
    if record.mode == "append" or (
        record.parent_id is not None and all(s.id != record.parent_id for s in stored)
    ) or (record.parent_id is None and stored and stored[0].parent_id is not None):
        # A parent no longer on the active branch (archived concurrently, as a branch or into
        # the archive) is not a reason to lose the turn: it goes at the end, like a stateful
        # client's. Nor is a turn from the very start once the start is archived: the archived
        # part is never rewritten (a record reconciled before the move).
        parent = stored[-1].id if stored else None
        return TranscriptEdit(len(stored), _chained(parent, record))

    position = 0
    if record.parent_id is not None:
        position = next(i for i, s in enumerate(stored) if s.id == record.parent_id) + 1
    new = _chained(record.parent_id, record)
    matched = 0
    while (matched < len(new) and position + matched < len(stored)
           and stored[position + matched].id == new[matched].id):
        matched += 1
    rest = new[matched:]
    if not rest:
        return TranscriptEdit(len(stored), ())  # already recorded (a retried job)
    return TranscriptEdit(min(position + matched, len(stored)), rest)


def _chained(parent_id: str | None, record: TurnRecord) -> tuple[StoredMessage, ...]:
    out = chain(parent_id, record.messages, created_at=record.created_at)
    if record.incomplete_reply and out:
        last = out[-1]
        out = out[:-1] + (StoredMessage(last.id, last.parent_id, last.message, last.created_at,
                                        incomplete=True),)
    return out
