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


def bump_version(pipe: Any, key: str) -> None:
    """Queue a bump of the version counter `key` on a pipeline or transaction (2 commands)."""
    pipe.set(key, random_start(), nx=True)
    pipe.incr(key)
