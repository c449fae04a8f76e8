"""Pending turns applied on a loaded transcript, kept in process between loads.

`RedisStore.load` shows a conversation as it will be once every pending turn (enqueued, not
yet applied by the recorder) is applied. While the recorder trails a busy conversation, every
request of it read the same pending turns again — each decoded and applied anew, so a load
cost grew with the backlog. This cache keeps, per conversation, each pending turn decoded
(by its seq, checked against the text stored under it) and the result of applying them on the
transcript the load read: when the transcript is the same object (the transcript cache
returns the cached tuple while nothing changed) and the turns applied last time are still the
first ones pending, only the turns enqueued since are decoded and applied.

Invariants: the result equals applying every pending turn after `done` to the transcript in
seq order (`apply_turn`), skipping undecodable turns and turns created at or before the erase
tombstone; a turn is decoded again whenever the text under its seq differs (a seq reused after
the conversation was deleted); bounded: least recently used conversations are dropped beyond
`max_conversations`.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Mapping

from gateway.core.ids import ConversationKey
from gateway.core.messages import StoredMessage
from gateway.core.transcript import TurnRecord, apply_turn
from gateway.store.codec import CodecError

log = logging.getLogger("gateway.store")

Decode = Callable[[str], TurnRecord]
"""Opens and decodes one pending turn as stored (CodecError if it cannot)."""
Erased = Callable[[float], bool]
"""Whether a turn created at that time is erased (`redis_store.erased_before`)."""


@dataclass(slots=True)
class _Applied:
    base: tuple[StoredMessage, ...]
    tombstone: str | None
    seqs: tuple[int, ...]
    messages: tuple[StoredMessage, ...]
    decoded: dict[int, tuple[str, TurnRecord | None]] = field(default_factory=dict)
    """seq → (the text stored under it, its turn; None: undecodable)."""


class PendingCache:
    """See the module docstring."""

    def __init__(self, max_conversations: int = 1024):
        self.max_conversations = max_conversations
        self._entries: OrderedDict[ConversationKey, _Applied] = OrderedDict()
        self.decoded = 0
        """Pending turns decoded so far (each once while it stays pending)."""

    def __len__(self) -> int:
        return len(self._entries)

    def applied(self, key: ConversationKey, base: tuple[StoredMessage, ...],
                pending: Mapping[str, str], done: int, tombstone: str | None,
                decode: Decode, erased: Erased) -> tuple[StoredMessage, ...]:
        """`base` with the turns of `pending` (seq → stored text) after seq `done` applied in
        seq order; `tombstone`: the erase tombstone `erased` compares with."""
        seqs = tuple(sorted(s for s in map(int, pending) if s > done))
        entry = self._entries.get(key)
        if not seqs:
            if entry is not None:
                del self._entries[key]
            return base
        decoded = entry.decoded if entry is not None else {}
        messages, start = base, 0
        if entry is not None and entry.base is base and entry.tombstone == tombstone \
                and seqs[:len(entry.seqs)] == entry.seqs \
                and all(decoded[s][0] == pending[str(s)] for s in entry.seqs):
            messages, start = entry.messages, len(entry.seqs)
        for seq in seqs[start:]:
            text = pending[str(seq)]
            known = decoded.get(seq)
            if known is None or known[0] != text:
                known = decoded[seq] = (text, self._decode(key, seq, text, decode))
            turn = known[1]
            if turn is None or erased(turn.created_at):
                continue  # a poison job (the recorder dead-letters it), or erased since
            messages = apply_turn(messages, turn).applied_to(messages)
        self._entries[key] = _Applied(base, tombstone, seqs, messages,
                                      {s: decoded[s] for s in seqs})
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_conversations:
            self._entries.popitem(last=False)
        return messages

    def _decode(self, key: ConversationKey, seq: int, text: str,
                decode: Decode) -> TurnRecord | None:
        self.decoded += 1
        try:
            return decode(text)
        except CodecError:
            # A poison job: the recorder will dead-letter it; the conversation stays usable.
            log.warning("skipping undecodable pending turn %s of %s", seq, key)
            return None
