"""The one way memory stores write: a transaction handed out by a `Writes`.

Every write of a memory store that the memory worker runs (an index batch, a chunk, facts, the
profile, topics, pins, the user's recall index) is a MULTI/EXEC taken from a `Writes`. The user
API writes through `Direct` (a plain transaction); a memory job writes through its `JobFence`
(gateway/memory/jobs/fence.py), whose transactions also check, atomically with the write, that
the user was not erased and the conversation not deleted since the job started.

`transaction(*watch)` yields a pipeline:
- with no `watch` keys: buffered (MULTI already issued for a fence): queue commands, `execute()`;
- with `watch` keys: WATCHing them, in immediate mode: read what the write depends on, then
  `pipe.multi()`, queue, `execute()` — which raises WatchError if a watched key changed.
"""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator, Protocol

import redis.asyncio as aioredis


class Writes(Protocol):
    def transaction(self, *watch: str) -> contextlib.AbstractAsyncContextManager[Any]:
        """A transaction pipeline (module docstring)."""
        ...


class Direct:
    """Plain transactions on `redis`: writes made on a user's behalf, or outside any job."""

    def __init__(self, redis: aioredis.Redis):
        self._redis = redis

    @contextlib.asynccontextmanager
    async def transaction(self, *watch: str) -> AsyncIterator[Any]:
        async with self._redis.pipeline(transaction=True) as pipe:
            if watch:
                await pipe.watch(*watch)
            yield pipe
