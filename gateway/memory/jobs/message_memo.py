"""What the memory worker derives from one stored message, kept in process by message id.

Each run of the memory worker sees the whole active branch, and its processors look again at
messages they looked at on the previous turn: the topic tracker redacts, tokenises and embeds
the current topic's latest messages to compare and label it, compaction finds the dates
written in every message. Per turn that was ~60 redactions, ~260 tokenisations and ~6
embeddings of messages whose results had not changed — most of the worker's CPU, on the core
the serving process shares (bench/overhead).

A stored message's id is chained over its parent's id and its canonical content
(gateway/core/messages.chain_id, sha256), so anything computed from a message alone is fixed
for its id: the memo keys such values by (kind, message id) and never needs invalidating.
Erased or forked messages simply stop being asked for and age out.

Invariants: a value is a pure function of the message's content (and of the process's fixed
embedder for vectors); bounded: least recently used values go first beyond `max_values`.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, TypeVar

T = TypeVar("T")


class MessageMemo:
    """Least-recently-used map (kind, message id) -> value. One per worker process, shared by
    the processors that derive the same values (each kind is one derivation)."""

    def __init__(self, max_values: int = 20_000):
        if max_values < 1:
            raise ValueError("max_values must be at least 1")
        self.max_values = max_values
        self._values: OrderedDict[tuple[str, str], object] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._values)

    def get(self, kind: str, message_id: str) -> object | None:
        key = (kind, message_id)
        value = self._values.get(key)
        if value is not None:
            self._values.move_to_end(key)
            self.hits += 1
        return value

    def put(self, kind: str, message_id: str, value: object) -> None:
        self._values[(kind, message_id)] = value
        self._values.move_to_end((kind, message_id))
        while len(self._values) > self.max_values:
            self._values.popitem(last=False)

    def derive(self, kind: str, message_id: str, compute: Callable[[], T]) -> T:
        """The memoised value of `kind` for the message, computed now if not held."""
        value = self.get(kind, message_id)
        if value is None:
            self.misses += 1
            value = compute()
            self.put(kind, message_id, value)
        return value  # type: ignore[return-value]
