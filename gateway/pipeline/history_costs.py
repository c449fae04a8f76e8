"""The token cost of each message of a conversation's history, kept from request to request.

Every request's rewrite needs `count_message` of every history message: the newest ones to
fill the recent window, all of them for the original history's size (`tokens_original`, and
whether the whole history fits). Counting them again is one cached count per message — but
on the strings of this request's body (a stateless client resends the whole history), so
each text would be hashed and compared afresh on every request (what that cost:
docs/decisions.md, "History costs carried between requests").

A history message's id is chained over its parent's and its canonical content
(gateway/core/messages.chain_id), so the id of a history's last message names the whole
history, and `count_message` is a function of that canonical content. This memo keeps, by
(tokenizer, id of the last message), the costs of the history up to it; a request finds the
longest of its history's prefixes held (a stateless client's previous request ended two
messages back) and counts only what follows.

Invariants: costs are only ever reused for the same ids under the same tokenizer, and equal
`count_each` of the same messages (tests/unit/test_history_costs.py); bounded in entries and in
costs held (least recently used first).
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.core.messages import Message
from gateway.core.text.tokens import Tokenizer, count_each
from gateway.tokenizer import BoundedCache

LOOK_BACK = 8
"""How many of the newest messages may be new since a held prefix (a request's turn and the
previous reply: 2; with tool calls, a few more)."""


class HistoryCosts:
    def __init__(self, max_histories: int = 4096, max_costs: int = 2_000_000):
        """Bounds: `max_histories` histories, `max_costs` costs in all (8 bytes each)."""
        self._held: dict[Tokenizer, BoundedCache[str, tuple[int, ...]]] = {}
        self._bounds = (max_histories, max_costs)
        self.counted = 0
        """Messages counted (not found in a held prefix) since the start: for tests."""

    def costs(self, history: Sequence[Message], ids: Sequence[str | None],
              tokenizer: Tokenizer) -> tuple[int, ...]:
        """`count_each(history, tokenizer)`, reusing the costs of a held prefix. `ids`: the
        chained id of each history message (None for one whose id is not known)."""
        if len(ids) != len(history):
            raise ValueError(f"{len(ids)} ids for {len(history)} history messages")
        held = self._held.get(tokenizer)
        if held is None:
            held = self._held[tokenizer] = BoundedCache(
                *self._bounds, lambda _id, costs: len(costs) + 1)
        known: tuple[int, ...] = ()
        for end in range(len(ids), max(0, len(ids) - LOOK_BACK), -1):
            last = ids[end - 1]
            if last is not None and (found := held.get(last)) is not None \
                    and len(found) == end:
                known = found
                break
        new = count_each(history[len(known):], tokenizer)
        self.counted += len(new)
        costs = known + new
        if ids and ids[-1] is not None and new:
            held.put(ids[-1], costs)
        return costs
