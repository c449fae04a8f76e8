"""The recorder of a Redis Cluster store: one `Recorder` per shard's record stream.

A cluster key space has one record stream per shard (gateway/store/keys.py), each in the
slot of the conversations it holds jobs for, so a recorder's transaction never crosses slots.
`ShardedRecorder` runs a `Recorder` for each stream (its own consumer group, its own
XAUTOCLAIM of dead consumers' entries, its own blocking read) and has the `Recorder`'s
lifecycle surface, so the app and the worker process use either alike.

Invariants: every shard's stream is consumed by this process; each job is applied by the
recorder of its own stream only (a conversation's jobs are all on one stream, so per-
conversation order holds as with one Redis); stop/drain/remove_consumers reach every shard,
and a shard that fails does not keep the others from finishing.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis

from gateway.store.keys import KeySpace
from gateway.store.recording.recorder import Recorder


class ShardedRecorder:
    """A `Recorder` per shard of `keys`, started, drained and counted together."""

    def __init__(self, client: aioredis.Redis, keys: KeySpace, **options: Any):
        """`options`: as `Recorder`'s, given to each shard's recorder."""
        self.keys = keys
        self.shards = tuple(Recorder(client, keys, shard=shard, **options)
                            for shard in keys.shard_ids())

    async def start(self) -> None:
        for recorder in self.shards:
            await recorder.start()

    async def stop(self, timeout: float | None = None) -> None:
        await asyncio.gather(*(r.stop(timeout) for r in self.shards))

    async def drain(self, timeout: float) -> int:
        """Each shard drains within `timeout` (they drain concurrently); see Recorder.drain."""
        return sum(await asyncio.gather(*(r.drain(timeout) for r in self.shards)))

    async def remove_consumers(self, stale_after_ms: int | None = None) -> list[str]:
        removed = await asyncio.gather(*(r.remove_consumers(stale_after_ms)
                                         for r in self.shards))
        return [name for names in removed for name in names]

    async def process_available(self) -> int:
        finished = 0
        for recorder in self.shards:
            finished += await recorder.process_available()
        return finished

    @property
    def applied(self) -> int:
        return sum(r.applied for r in self.shards)

    @property
    def dead_lettered(self) -> int:
        return sum(r.dead_lettered for r in self.shards)

    @property
    def duplicates(self) -> int:
        return sum(r.duplicates for r in self.shards)

    @property
    def reclaimed(self) -> int:
        return sum(r.reclaimed for r in self.shards)
