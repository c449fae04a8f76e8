"""How long the worker's jobs take, and how often they are retried, as Prometheus metrics.

The worker is a process of its own (`gateway worker`, or any number of them elsewhere) with
no HTTP endpoint; `/metrics` is served by the serving processes. So the figures live in the
store, like the queue gauges: each worker adds what it observes to a few hashes (one pipelined
round trip per job, after the job), and every serving process reads them at each scrape —
the same cluster-wide figures on every replica, whichever process did the work.

- `gateway_worker_job_seconds{kind}` (histogram): `record_apply` (a turn applied to its
  transcript), `embed` (new turns embedded and indexed), `summarise` (compaction),
  `user_index` (the user-level recall index), `extract` (facts and profile), `pins` (the
  importance rule's pins).
- `gateway_worker_job_retries_total{queue}` (counter): failed attempts that will be retried,
  for the `record` and `memory` queues. Dead letters are the existing
  `gateway_record_dead_letters` and `gateway_memory_dead_letters`.
- `gateway_memory_oldest_wait_seconds` (gauge): how long the conversation that has waited
  longest for memory work has waited, from the time the memory workers last saw in their queue
  (each publishes the oldest mark after every pass: `memory_oldest`); it keeps growing while
  no worker takes that conversation — also when no worker runs. 0 when nothing waits.

Writing a metric never fails a job: an error is logged at debug and the figure is lost.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    import redis.asyncio as redis

logger = logging.getLogger("gateway.job_metrics")

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, math.inf)
KINDS = ("record_apply", "embed", "summarise", "user_index", "extract", "pins", "topics")
QUEUES = ("record", "memory")
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, math.inf)
"""Texts per embedding model call (EmbeddingService batches up to its max_batch, 64)."""


def latency_key(prefix: str, kind: str) -> str:
    """Hash: `le` of each bucket -> observations in it (not cumulative), `count`, `sum`."""
    return f"{prefix}:worker:job:{kind}"


def batch_key(prefix: str) -> str:
    """Hash, as `latency_key`'s: texts per embedding model call of the worker processes."""
    return f"{prefix}:worker:embed_batch"


def retries_key(prefix: str) -> str:
    """Hash: queue -> failed attempts that were retried."""
    return f"{prefix}:worker:retries"


def oldest_key(prefix: str) -> str:
    """String: the mark time (seconds) of the conversation waiting longest for memory work, as
    a memory worker last saw it; absent when none waits."""
    return f"{prefix}:worker:memory_oldest"


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(bound)


class JobMetrics:
    """The writing side, in the worker: one per process, on a store client of its own."""

    def __init__(self, client: redis.Redis, prefix: str = "gw"):
        self._redis = client
        self._prefix = prefix

    async def observe(self, kind: str, seconds: float) -> None:
        bucket = next(b for b in BUCKETS if seconds <= b)
        key = latency_key(self._prefix, kind)
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.hincrby(key, _le(bucket), 1)
                pipe.hincrby(key, "count", 1)
                pipe.hincrbyfloat(key, "sum", seconds)
                await pipe.execute()
        except Exception as exc:  # noqa: BLE001 — a metric never fails the job it measures
            logger.debug("job metric of %s not written: %r", kind, exc)

    async def batches(self, sizes: Mapping[int, int]) -> None:
        """Add embedding batch sizes (texts per model call -> calls) to the histogram."""
        if not sizes:
            return
        key = batch_key(self._prefix)
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for size, calls in sizes.items():
                    pipe.hincrby(key, _le(next(b for b in BATCH_BUCKETS if size <= b)), calls)
                pipe.hincrby(key, "count", sum(sizes.values()))
                pipe.hincrbyfloat(key, "sum", float(sum(s * n for s, n in sizes.items())))
                await pipe.execute()
        except Exception as exc:  # noqa: BLE001 — a metric never fails the job it measures
            logger.debug("embedding batch sizes not written: %r", exc)

    async def memory_oldest(self, marked_at: float | None) -> None:
        """Publish when the conversation waiting longest was marked (None: none waits)."""
        key = oldest_key(self._prefix)
        try:
            if marked_at is None:
                await self._redis.delete(key)
            else:
                await self._redis.set(key, repr(marked_at))
        except Exception as exc:  # noqa: BLE001 — as above
            logger.debug("oldest memory wait not written: %r", exc)

    async def retried(self, queue: str) -> None:
        try:
            await self._redis.hincrby(retries_key(self._prefix), queue, 1)
        except Exception as exc:  # noqa: BLE001 — as above
            logger.debug("retry of %s not counted: %r", queue, exc)


@dataclass(eq=False)  # a registry keys its collectors by identity
class StoredJobMetrics(Collector):
    """The reading side, in a serving process: the figures read at the last scrape
    (`read`), exposed as Prometheus families on the process's registry."""

    latency: dict[str, dict[str, str]] = field(default_factory=dict)
    retries: dict[str, str] = field(default_factory=dict)
    batch: dict[str, str] = field(default_factory=dict)
    oldest: float | None = None
    """The mark time of the conversation waiting longest for memory work (None: none)."""
    clock: Callable[[], float] = time.time

    def queue_reads(self, pipe: Any, prefix: str) -> None:
        """Add this collector's reads to a scrape's pipeline (in the order `read` expects)."""
        for kind in KINDS:
            pipe.hgetall(latency_key(prefix, kind))
        pipe.hgetall(retries_key(prefix))
        pipe.hgetall(batch_key(prefix))
        pipe.get(oldest_key(prefix))

    def read(self, replies: list[Any]) -> None:
        """Take the replies of `queue_reads` (an error reply leaves that figure as it was)."""
        for kind, reply in zip(KINDS, replies):
            if isinstance(reply, dict):
                self.latency[kind] = reply
        if len(replies) > len(KINDS) and isinstance(replies[len(KINDS)], dict):
            self.retries = replies[len(KINDS)]
        if len(replies) > len(KINDS) + 1 and isinstance(replies[len(KINDS) + 1], dict):
            self.batch = replies[len(KINDS) + 1]
        if len(replies) > len(KINDS) + 2 and not isinstance(replies[len(KINDS) + 2],
                                                            Exception):
            self.oldest = _seconds(replies[len(KINDS) + 2])

    def oldest_wait(self) -> float:
        """Seconds the conversation waiting longest has waited (0: none waits)."""
        return max(0.0, self.clock() - self.oldest) if self.oldest is not None else 0.0

    def collect(self) -> Iterator[Any]:
        histogram = HistogramMetricFamily(
            "gateway_worker_job_seconds",
            "Worker job latency by kind, from every worker process (read from the store).",
            labels=["kind"])
        for kind in KINDS:
            stored = self.latency.get(kind, {})
            cumulative, buckets = 0, []
            for bound in BUCKETS:
                cumulative += int(stored.get(_le(bound), 0))
                buckets.append((_le(bound), cumulative))
            histogram.add_metric([kind], buckets, float(stored.get("sum", 0)))
        yield histogram
        batch = HistogramMetricFamily(
            "gateway_embedder_batch_size",
            "Texts per embedding model call in the worker processes (read from the store).")
        cumulative, buckets = 0, []
        for bound in BATCH_BUCKETS:
            cumulative += int(self.batch.get(_le(bound), 0))
            buckets.append((_le(bound), cumulative))
        batch.add_metric([], buckets, float(self.batch.get("sum", 0)))
        yield batch
        retries = CounterMetricFamily(
            "gateway_worker_job_retries",
            "Failed worker attempts that were retried, by queue (read from the store).",
            labels=["queue"])
        for queue in QUEUES:
            retries.add_metric([queue], float(self.retries.get(queue, 0)))
        yield retries
        yield GaugeMetricFamily(
            "gateway_memory_oldest_wait_seconds",
            "How long the conversation waiting longest for memory work has waited (read "
            "from the store; 0: none waits).", value=self.oldest_wait())


def _seconds(reply: Any) -> float | None:
    try:
        return float(reply) if reply is not None else None
    except (TypeError, ValueError):
        return None
