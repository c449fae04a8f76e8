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

The job's heartbeat (`Heartbeat`): the job runs as a task of its own; every `seconds` one
script renews its lock (PEXPIRE, only while it holds the job's token) and compares the
tombstones with those the job started with. An erase or delete therefore ends a running job
within one beat, even one waiting on a slow step (an LLM call, a large embedding batch) — so
the erase, waiting for the lock to be released, can answer `complete`. The cancel is a
courtesy, not the guarantee: the fence already refuses every write of the job atomically.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from typing import Any, AsyncIterator, Coroutine, Sequence, TypeVar

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


T = TypeVar("T")

# KEYS: the job's lock, the user's erase tombstone, the conversation's tombstone. ARGV: the
# lock's token, its time to live (ms), the tombstones the job started with ("" absent).
# Returns 1 (renewed), 0 (a tombstone changed: the job must stop; not renewed) or -1 (the lock
# is not ours any more). One slot in a cluster: all three carry the user's hash tag.
_BEAT_LUA = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if (redis.call('GET', KEYS[2]) or '') ~= ARGV[3]
    or (redis.call('GET', KEYS[3]) or '') ~= ARGV[4] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""


class Stopped(enum.Enum):
    FENCED = "fenced"  # the user was erased or the conversation deleted
    LOST = "lost"      # the lock expired under the job (a beat came too late)


class Heartbeat:
    """Renews a running job's lock and cancels the job when its fence trips (module
    docstring)."""

    def __init__(self, redis: aioredis.Redis, *, seconds: float, lock_ms: int):
        if seconds * 2000 >= lock_ms:
            raise ValueError("heartbeat_seconds must be less than half the lock's time")
        self._seconds = seconds
        self._lock_ms = lock_ms
        self._beat = redis.register_script(_BEAT_LUA)

    async def run(self, job: Coroutine[Any, Any, T], fence: JobFence, lock: str,
                  token: str) -> T | Stopped:
        """`job`'s result, or why it was stopped; raises what it raised. The job ends before
        this returns or raises, also when this itself is cancelled."""
        task = asyncio.get_running_loop().create_task(job, name=f"memory-job {fence.key}")
        try:
            while not task.done():
                await asyncio.wait({task}, timeout=self._seconds)
                if task.done():
                    break
                beat = await self._beat(keys=[lock, *fence.tombstones],
                                        args=[token, self._lock_ms,
                                              *(t or "" for t in fence.seen)])
                if beat != 1:
                    await _cancelled(task)
                    return Stopped.FENCED if beat == 0 else Stopped.LOST
        finally:
            if not task.done():  # cancelled from outside, or a beat failed (store outage)
                await _cancelled(task)
        return task.result()


async def _cancelled(task: asyncio.Task[Any]) -> None:
    """Cancel `task` and wait until it has ended (what it raised meanwhile is dropped)."""
    task.cancel()
    await asyncio.wait({task})
    if not task.cancelled():
        task.exception()  # retrieved: it ended on its own before the cancel reached it
