"""The state every handler reaches: one `Gateway` per serving process, built in the app's
lifespan (gateway/http/app.py) and read by the routes, the memory API and the console."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from gateway.config import Config
from gateway.config.tenants import TenantDirectory
from gateway.http.admin import AdminKeys
from gateway.memory.runtime import MemoryRuntime
from gateway.ops.observability import Metrics
from gateway.pipeline.chat import Pipeline
from gateway.pipeline.ratelimit import RateLimiter
from gateway.pipeline.record_buffer import RecordBuffer
from gateway.pipeline.request_history import RequestHistory
from gateway.pipeline.responses import ResponseChains
from gateway.store.cluster import CommandGate
from gateway.store.disk import DiskRewrites
from gateway.store.pool import StorePool
from gateway.store.recording.recorder import Recorder
from gateway.store.recording.sharded import ShardedRecorder
from gateway.store.redis_store import RedisStore

logger = logging.getLogger("gateway")


@dataclass
class Gateway:
    """Everything the handlers reach, built once per process."""

    config: Config
    tenants: TenantDirectory
    admin: AdminKeys
    limiter: RateLimiter
    pipeline: Pipeline
    store: RedisStore
    recorder: Recorder | ShardedRecorder | None
    """The recorder of this process; None when a worker process applies the turns."""
    metrics: Metrics
    memory: MemoryRuntime | None = None
    buffer: RecordBuffer | None = None
    store_pool: StorePool | CommandGate | None = None
    """Counts the store's connections in use and waits (a cluster's: its commands in flight)."""
    history: RequestHistory | None = None
    """The recent requests kept for the console; None unless `console.enabled`."""
    disk: DiskRewrites | None = None
    """Rewrites of the store's files after deletes (None: each delete makes its own)."""
    responses: ResponseChains | None = None
    """The Responses API's stored responses (`previous_response_id`)."""

    async def refresh_queue_metrics(self) -> None:
        """The shared queues' gauges, from the store (one round trip; left as they were, and
        logged, if it cannot be read)."""
        keys = self.store.keys
        shards = keys.shard_ids()  # one without a cluster; every shard's queues are summed
        try:
            async with self.store.client.pipeline(transaction=False) as pipe:
                for shard in shards:
                    pipe.xlen(keys.records_at(shard))
                    pipe.xinfo_groups(keys.records_at(shard))
                    pipe.get(keys.dead_count_at(shard))
                    pipe.zcard(keys.memory_dirty_at(shard))
                    pipe.get(f"{keys.memory_dead_at(shard)}:count")
                self.metrics.jobs.queue_reads(pipe, keys.prefix)
                replies = await pipe.execute(raise_on_error=False)
                per_shard = 5 * len(shards)
                self.metrics.jobs.read(replies[per_shard:])
        except Exception as exc:  # noqa: BLE001 — a scrape must answer; the log says why
            logger.warning("queue metrics unavailable: %r", exc)
            return
        length = pending = lag = dead = dirty = memory_dead = 0
        for n in range(0, per_shard, 5):
            s_length, groups, s_dead, s_dirty, s_memory_dead = replies[n:n + 5]
            group = next((g for g in groups if g.get("name") == keys.group), None) \
                if isinstance(groups, list) else None
            s_length = s_length if isinstance(s_length, int) else 0
            length += s_length
            pending += int(group.get("pending") or 0) if group else 0
            # No group yet: no recorder ever ran, and every entry waits for one.
            lag += int(group.get("lag") or 0) if group else s_length
            dead += int(s_dead or 0) if not isinstance(s_dead, Exception) else 0
            dirty += s_dirty if isinstance(s_dirty, int) else 0
            memory_dead += int(s_memory_dead or 0) \
                if not isinstance(s_memory_dead, Exception) else 0
        m = self.metrics
        m.record_queue_length.set(length)
        m.record_queue_pending.set(pending)
        m.record_queue_lag.set(lag)
        m.record_dead_letters.set(dead)
        m.memory_queue.set(dirty)
        m.memory_dead_letters.set(memory_dead)

    def refresh_metrics(self) -> None:
        if self.store_pool is not None:
            self.metrics.observe_pool(self.store_pool.stats())
        if self.recorder is not None:
            self.metrics.recorder_applied.set(self.recorder.applied)
            self.metrics.recorder_dead.set(self.recorder.dead_lettered)
        self.metrics.transcript_cache_bytes.set(self.store.cache.nbytes
                                                + self.store.archive.cache.nbytes)
        if self.memory is not None:
            self.metrics.index_bytes.labels("dense").set(self.memory.vector_index.nbytes)
            self.metrics.index_bytes.labels("lexical").set(self.memory.lexical_index.nbytes)
            self.metrics.index_evictions.labels("dense").set(self.memory.vector_index.evictions)
            self.metrics.index_evictions.labels("lexical").set(
                self.memory.lexical_index.evictions)
        if self.buffer is not None:
            self.metrics.buffer_held.set(len(self.buffer))
            self.metrics.buffer_buffered.set(self.buffer.buffered)
            self.metrics.buffer_flushed.set(self.buffer.flushed)
            self.metrics.buffer_dropped.set(self.buffer.dropped)
