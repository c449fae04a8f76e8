"""A memory job's heartbeat: its lock renewed while it runs, and the job cancelled when its
fence trips or its lock is no longer its own.

The job runs as a task of its own; every `seconds` one script renews the lock (PEXPIRE, only
while it holds the job's token) and compares the user's and the conversation's tombstones
with those the job started with (`JobFence`). An erase or delete therefore ends a running job
within one beat, even one waiting on a slow step (an LLM call, a large embedding batch) — so
the erase, waiting for the lock to be released, can answer `complete`. The cancel is a
courtesy, not the guarantee: the fence already refuses every write of the job atomically.
"""

from __future__ import annotations

import asyncio
import enum
from typing import Any, Coroutine, TypeVar

import redis.asyncio as aioredis

from gateway.memory.jobs.fence import JobFence

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
