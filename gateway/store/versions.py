"""Version counters: every writer of a cached namespace bumps its counter in the same
transaction, and in-process caches (search indexes, decoded entries) are valid only while the
counter they were built at is the one the store holds.

A counter starts at a random 62-bit value instead of 1. Erasing a namespace deletes its
counter; were it to restart at 1, a namespace written again could reach exactly the version an
in-process cache still holds for the erased data, and that cache — vectors, ids, decoded texts —
would pass as current. Starting at random makes that a 1-in-2^62 event. Counters are only ever
compared for equality, never ordered across a deletion.
"""

from __future__ import annotations

import secrets
from typing import Any

START_BITS = 62  # INCR works on signed 64-bit integers: room for 2^62 increments after any start

def random_start() -> int:
    return secrets.randbits(START_BITS)


REMOVAL_STEP = 1 << 24
"""What a write that removes turns adds to its namespace's counter (others add 1): a cache can
tell a counter that only grew by additions since it read it (`only_added`) from one that may
have lost an item on the way."""


def bump_version(pipe: Any, key: str, *, removed: bool = False) -> None:
    """Queue a bump of the version counter `key` on a pipeline or transaction (2 commands).
    `removed`: the write removes turn entries (a forked-away branch): the counter jumps by
    REMOVAL_STEP."""
    pipe.set(key, random_start(), nx=True)
    if removed:
        pipe.incrby(key, REMOVAL_STEP)
    else:
        pipe.incr(key)


def only_added(old: str, new: str) -> bool:
    """Whether counter value `new` follows `old` by writes that removed no turn: it grew by
    less than REMOVAL_STEP. A deleted namespace restarts at random (`random_start`): from any
    value it held before, that is growth below REMOVAL_STEP with probability 2^-38; growth beyond it
    (16.7M additions between two reads) only costs a cache its turns."""
    try:
        grown = int(new) - int(old)
    except ValueError:
        return False
    return 0 < grown < REMOVAL_STEP
