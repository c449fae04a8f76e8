"""The order the memory worker takes due conversations in: by tenant, in turn.

The dirty set is ordered by time (oldest first). Taken in that order, a tenant that marked a
hundred conversations dirty a moment before another tenant marked one would have all of its
hundred processed first. `taking_turns` reorders a window of the oldest due entries so that
tenants take turns: the oldest entry of each tenant (tenants ordered by their oldest entry),
then the second of each, and so on; within a tenant, oldest first. Tenants take turns
within the window only (the worker's `window`, 512 entries): a tenant with more due
conversations than that, all older than another tenant's, keeps the other's waiting until its
backlog ahead of it fits in the window.
"""

from __future__ import annotations

from typing import Sequence, TypeVar

from gateway.store.codec import CodecError, decode_key

Entry = TypeVar("Entry", bound=tuple)


def taking_turns(due: Sequence[Entry]) -> list[Entry]:
    """`due` (member, score) entries, oldest first, reordered so tenants take turns. An
    undecodable member counts as a tenant of its own (the worker dead-letters it)."""
    queues: dict[str, list[Entry]] = {}
    for entry in due:
        queues.setdefault(_tenant(entry[0]), []).append(entry)
    turns: list[Entry] = []
    depth = max((len(q) for q in queues.values()), default=0)
    for i in range(depth):
        turns.extend(q[i] for q in queues.values() if i < len(q))
    return turns


def _tenant(member: str) -> str:
    try:
        return "t:" + decode_key(member).tenant
    except CodecError:
        return "?:" + member
