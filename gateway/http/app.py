"""The ASGI application: adapters are built in the lifespan and handed to the pipeline."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncIterator

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException

from gateway.http.admin import AdminKeys
from gateway.config import Config, load_config
from gateway.http.console import console_routes
from gateway.errors import GatewayError
from gateway.ops.job_metrics import JobMetrics
from gateway.ops.logs import configure_logging
from gateway.memory.runtime import MemoryRuntime, build_memory
from gateway.ops.observability import Metrics
from gateway.pipeline.chat import Pipeline
from gateway.pipeline.ratelimit import RateLimiter
from gateway.ports import Upstream
from gateway.pipeline.record_buffer import RecordBuffer
from gateway.pipeline.record_journal import RecordJournal
from gateway.pipeline.request_history import RequestHistory
from gateway.http.routes import on_gateway_error, on_http_exception, on_unexpected, routes
from gateway.store import connect
from gateway.store.cluster import key_space
from gateway.store.embedded import EmbeddedRedis
from gateway.store.keyring import load_encryption
from gateway.store.cluster import CommandGate
from gateway.store.pool import StorePool
from gateway.store.recording.recorder import Recorder
from gateway.store.redis_store import RedisStore
from gateway.store.recording.sharded import ShardedRecorder
from gateway.pipeline.tasks import TaskTracker
from gateway.config.tenants import TenantDirectory
from gateway.tokenizer import tokenizer_for_model
from gateway.ops.tracing import start_tracing
from gateway.upstream import FAKE_PREFIX, RoutingUpstream
from gateway.upstream.endpoint import openai_endpoint
from gateway.worker import WORKER_ENV, Background, build_recorder, step

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

logger = logging.getLogger("gateway")

# `gateway serve` starts the embedded store once in the parent process and tells its uvicorn
# workers where it is through this variable, so they share one server.
STORE_URL_ENV = "GATEWAY_STORE_URL"
CONFIG_ENV = "GATEWAY_CONFIG"
LOG_LEVEL_ENV = "GATEWAY_LOG_LEVEL"


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
        if self.buffer is not None:
            self.metrics.buffer_held.set(len(self.buffer))
            self.metrics.buffer_buffered.set(self.buffer.buffered)
            self.metrics.buffer_flushed.set(self.buffer.flushed)
            self.metrics.buffer_dropped.set(self.buffer.dropped)


class InlineProcessing:
    """`recorder.mode: inline` (tests): apply the turn and derive its memory before answering."""

    def __init__(self, recorder: Recorder | ShardedRecorder, memory: MemoryRuntime | None):
        self.recorder = recorder
        self.memory = memory

    async def process_available(self) -> int:
        applied = await self.recorder.process_available()
        if self.memory is not None:
            await self.memory.worker.process_available()
        return applied


def store_url(config: Config) -> tuple[str, EmbeddedRedis | None]:
    """Where the store is, starting the embedded server if this process must."""
    if os.environ.get(STORE_URL_ENV):
        return os.environ[STORE_URL_ENV], None
    if config.store != "embedded":
        return config.store, None
    embedded = EmbeddedRedis(config.server.data_dir)
    embedded.start()
    return embedded.url, embedded


async def _note_embedder(redis: Any, memory: MemoryRuntime) -> None:
    """Warn when the embedder changed since the last start: the store's vectors of the old one
    are not searched (their items are recalled lexically) until `gateway reindex` runs."""
    from redis.exceptions import RedisError

    from gateway.memory.records.keys import MemoryKeySpace
    from gateway.memory.jobs.reindex import note_embedder

    try:
        previous = await note_embedder(redis, MemoryKeySpace(), memory.embedding)
    except (RedisError, OSError) as exc:  # the store's own failures are reported elsewhere
        logger.warning(json.dumps({"event": "embedder_note_failed", "error": str(exc)}))
        return
    if previous is not None:
        logger.warning(json.dumps({
            "event": "embedder_changed", "previous": previous,
            "current": memory.embedding.embedder.name,
            "action": "run `gateway reindex`: until then the old embedder's vectors are not "
                      "searched and their items are recalled by lexical search only"}))


def routing_upstream(config: Config) -> RoutingUpstream:
    """The fake upstream in-process; the direct client's pool if a model speaks the OpenAI
    chat API; litellm (a ~3 s import) only if a model needs it, and then at start-up rather
    than on the first request. The caller closes it (`aclose`)."""
    models = [m for t in config.tenants.values() for m in t.models.values()
              if not m.model.startswith(FAKE_PREFIX)]
    direct_models = [openai_endpoint(m.model, m.api_base, m.litellm_params) is not None
                     for m in models]
    direct = litellm = None
    if any(direct_models):
        from gateway.upstream.direct import DirectUpstream

        direct = DirectUpstream()
    if not all(direct_models):
        from gateway.upstream.litellm_upstream import LitellmUpstream

        litellm = LitellmUpstream()
    return RoutingUpstream(direct=direct, litellm=litellm)


def create_app(config: Config, *, upstream: Upstream | None = None,
               span_exporter: SpanExporter | None = None) -> Starlette:
    """Build the app. `upstream` replaces the default routing upstream (tests);
    `span_exporter` replaces OTLP when `tracing.enabled` (tests: an in-memory exporter)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Starting the embedded server blocks (a subprocess and its readiness wait).
        url, embedded = await anyio.to_thread.run_sync(store_url, config)
        # Request-path calls give up quickly on a hung store (the request then goes through
        # without memory); the recorder's blocking reads get a connection of their own.
        timeout = config.server.store_timeout_seconds
        cluster = config.store_cluster.enabled
        redis = connect(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                        max_connections=config.server.store_pool_size, cluster=cluster)
        try:  # a wrong or missing key ends the start-up here, naming the config key
            encryption = await load_encryption(config, redis)
        except BaseException:
            await redis.aclose()
            if embedded is not None:
                await anyio.to_thread.run_sync(embedded.stop)
            raise
        store = RedisStore(redis, key_space(config), encryption=encryption)
        mode = recorder_mode(config)
        worker_redis = connect(url, socket_connect_timeout=timeout, cluster=cluster) if mode in (
            "inline", "background") else None
        # Turns applied and memory derived in this process (not a worker process): their job
        # metrics are written from here.
        jobs = JobMetrics(redis) if worker_redis is not None else None
        recorder = build_recorder(config, worker_redis, jobs, encryption=encryption) \
            if worker_redis is not None else None
        tasks, metrics = TaskTracker(), Metrics()
        tenants = TenantDirectory(config)
        tracing = start_tracing(config.tracing, span_exporter)
        routed = None if upstream else routing_upstream(config)
        chat_upstream = upstream or routed
        memory = None
        if any(t.memory.enabled for t in config.tenants.values()):
            memory = build_memory(config, redis, chat_upstream, tenants, tracing=tracing,
                                  jobs=jobs, encryption=encryption)
            await memory.embedding.warm_up()
            await _note_embedder(redis, memory)
        buffer = RecordBuffer(store, config.recorder.buffer_capacity,
                              retry_max_seconds=config.recorder.buffer_retry_max_seconds)
        limiter = RateLimiter(config, redis, store.keys, metrics)
        inline = InlineProcessing(recorder, memory) if mode == "inline" and recorder else None
        history = RequestHistory(
            redis, store.keys, max_entries=config.console.request_log_entries,
            last_ttl_seconds=config.console.last_request_ttl_seconds,
        ) if config.console.enabled else None
        pipeline = Pipeline(store=store, upstream=chat_upstream,
                            tokenizer_for=tokenizer_for_model, tasks=tasks, metrics=metrics,
                            inline_recorder=inline,
                            memory=memory.service if memory else None,
                            recall_settings=memory.recall if memory else None, buffer=buffer,
                            tracing=tracing, limiter=limiter, history=history)
        app.state.gateway = Gateway(config, tenants, AdminKeys(config), limiter, pipeline,
                                    store, recorder, metrics, memory, buffer,
                                    store_pool=getattr(redis, "gate", None)
                                    or getattr(redis, "connection_pool", None),
                                    history=history)
        if history is not None:
            await history.start()
        # Turns a previous process could not hand to the store go first, then new ones.
        journal = RecordJournal(config.server.data_dir, encryption=encryption)
        await journal.replay_into(buffer)
        await buffer.start()
        background = Background(recorder, memory) if mode == "background" and recorder else None
        if background is not None:
            await background.start()
        try:
            yield
        finally:
            # uvicorn runs this once it has stopped accepting and in-flight requests have
            # finished (or server.shutdown_timeout_seconds passed). Order: the turns of those
            # requests (stream records finishing in the background), then the buffer into the
            # store — what it does not take in time into the journal, on disk — then
            # (background mode) the recorder applies what it can; with a worker process,
            # `gateway serve` stops it after this. Every step is bounded by the drain timeout
            # (a close by the store timeout) and tolerates a store that is gone: it logs and
            # shutdown goes on — turns already enqueued are in the store.
            drain = config.recorder.drain_timeout_seconds
            await step("background tasks", tasks.drain(drain), drain)
            if history is not None:  # after the tasks: streams log their requests last
                await step("request history", history.drain(drain), drain)
            await journal.close(await buffer.drain(drain))
            if background is not None:
                await background.drain(drain, config.recorder.claim_idle_seconds)
            if memory is not None:
                memory.close()
            if routed is not None:
                await step("upstream connections", routed.aclose(), timeout)
            await step("store connection", redis.aclose(), timeout)
            if worker_redis is not None:
                await step("worker store connection", worker_redis.aclose(), timeout)
            if embedded is not None:
                await anyio.to_thread.run_sync(embedded.stop)
            if tracing is not None:  # the last spans out (a blocking export: off the loop)
                await anyio.to_thread.run_sync(tracing.shutdown)
            logger.info(json.dumps({
                "event": "shutdown_complete",
                "recorder_applied": recorder.applied if recorder else None,
                "buffer_flushed": buffer.flushed, "buffer_dropped": buffer.dropped,
                "journal_replayed": journal.replayed, "journal_spilled": journal.spilled}))

    exception_handlers: dict[Any, Any] = {
        HTTPException: on_http_exception,
        GatewayError: on_gateway_error,
        Exception: on_unexpected,
    }
    # The console's pages exist only when it is enabled (404 otherwise, like any unknown path).
    served = [*routes, *(console_routes() if config.console.enabled else [])]
    return Starlette(routes=served, lifespan=lifespan, exception_handlers=exception_handlers)


def recorder_mode(config: Config) -> str:
    """Where this process's recorded turns are applied. `process` means a worker process that
    `gateway serve` starts; an app built any other way (uvicorn, tests) has none beside it and
    applies them on its own loop instead, and says so — a turn is never left unapplied."""
    mode = config.recorder.mode
    if mode == "process" and not os.environ.get(WORKER_ENV):
        logger.info(json.dumps({"event": "recorder_on_serving_loop",
                                "reason": "recorder.mode is process but no worker process was "
                                          "started beside this app (gateway serve starts one)"}))
        return "background"
    return mode


def app_from_env() -> Starlette:
    """Factory for uvicorn workers: `uvicorn --factory gateway.http.app:app_from_env`."""
    config = load_config(os.environ.get(CONFIG_ENV, "config.yaml"))
    # Worker processes start fresh: give them the same one-line-per-record log output.
    configure_logging(os.environ.get(LOG_LEVEL_ENV, "info"), config.server.log_format)
    return create_app(config)
