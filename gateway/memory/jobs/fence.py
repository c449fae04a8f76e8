"""The fence of one memory job: nothing it derives lands after an erase or a delete.

A job reads the user's erase tombstone and the conversation's delete tombstone
(`KeySpace.erased`, `ConversationKeys.deleted`) when it starts. Each of its writes is a
transaction that WATCHes both tombstones, reads them, and goes on only if they still hold the
values the job started with; an erase or delete that lands between that read and EXEC aborts
the EXEC (WATCH). So the check and the write are one atomic step: an erase either comes after
the write (and deletes what it wrote) or before it (and the write never happens). A tripped
fence raises `JobFenced`; the worker ends the job without counting a failure.

Redis Cluster: both tombstones and every memory key of one user carry the hash tag of the
user's shard (gateway/store/keys.py), so they live in one slot and WATCH/MULTI spans them.

`erase` and `delete` write a tombstone strictly later than the one they replace
(gateway/store/redis_store.py), so every erase changes what a fence compares.
"""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator, Sequence

import redis.asyncio as aioredis
from redis.exceptions import WatchError

from gateway.core.ids import ConversationKey
from gateway.store.keys import KeySpace


class JobFenced(Exception):
    """The user was erased or the conversation deleted while a memory job ran on it."""


class JobFence:
    """`Writes` for one job (gateway/memory/records/writes.py), fenced by the tombstones."""

    def __init__(self, redis: aioredis.Redis, key: ConversationKey,
                 tombstones: Sequence[str], seen: Sequence[str | None]):
        """`tombstones`: the user's and the conversation's tombstone keys; `seen`: their
        values when the job started (None: absent)."""
        self._redis = redis
        self.key = key
        self.tombstones = tuple(tombstones)
        self.seen = tuple(seen)

    @classmethod
    async def open(cls, redis: aioredis.Redis, keys: KeySpace,
                   key: ConversationKey) -> JobFence:
        """The fence of a job starting now on `key` (reads the tombstones once)."""
        tombstones = (keys.erased(key.tenant, key.user), keys.conversation(key).deleted)
        return cls(redis, key, tombstones, await redis.mget(*tombstones))

    @property
    def latest(self) -> str | None:
        """The later of the tombstones the job started with (None: neither exists)."""
        present = [t for t in self.seen if t is not None]
        return max(present, key=int) if present else None

    def holds(self, values: Sequence[str | None]) -> bool:
        return tuple(values) == self.seen

    async def check(self) -> None:
        """Raise JobFenced if an erase or delete came since the job started."""
        if not self.holds(await self._redis.mget(*self.tombstones)):
            raise JobFenced(f"{self.key} was erased or deleted while memory work ran on it")

    @contextlib.asynccontextmanager
    async def transaction(self, *watch: str) -> AsyncIterator[Any]:
        """As `Writes.transaction`, and its EXEC fails unless the tombstones are unchanged:
        JobFenced if they changed (before or during the transaction)."""
        async with self._redis.pipeline(transaction=True) as pipe:
            await pipe.watch(*self.tombstones, *watch)
            # One GET each: a cluster's pipeline refuses MGET (same slot or not).
            if not self.holds([await pipe.get(t) for t in self.tombstones]):
                raise JobFenced(f"{self.key} was erased or deleted while memory work ran on it")
            if not watch:
                pipe.multi()
            try:
                yield pipe
            except WatchError:
                await self.check()  # a tombstone was written: say so, not "try again"
                raise
