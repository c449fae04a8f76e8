"""How a process of the gateway is put together, the same way in the server (gateway/http/app.py)
and the worker (gateway/worker.py): where the store is, its clients, the tenants' encryption,
tracing, memory, the recorder and the upstream — built in one order and torn down in the
reverse one, every step of the teardown bounded and tolerant of a store that is gone.

Layering: this module sits above everything it builds (store, upstream, memory, pipeline's
parts, ops) and below the two process entry points and the CLI, which are the only importers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable

import anyio
import redis.asyncio as aioredis

from gateway.config import Config
from gateway.config.tenants import TenantDirectory
from gateway.memory.runtime import MemoryRuntime, build_memory
from gateway.ops.allocator import start_trimmer
from gateway.ops.job_metrics import JobMetrics
from gateway.ops.tracing import Tracing, start_tracing
from gateway.memory.ports import Embedder
from gateway.ports import Upstream
from gateway.store import connect
from gateway.store.cluster import key_space
from gateway.store.encryption.crypto import NO_ENCRYPTION, Encryption
from gateway.store.embedded import EmbeddedRedis
from gateway.store.encryption.keyring import load_encryption
from gateway.store.recording.recorder import Recorder
from gateway.store.recording.sharded import ShardedRecorder
from gateway.store.transcript_cache import TranscriptCache
from gateway.upstream import FAKE_PREFIX, RoutingUpstream
from gateway.upstream.endpoint import anthropic_endpoint, openai_endpoint

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

logger = logging.getLogger("gateway")

STORE_URL_ENV = "GATEWAY_STORE_URL"
"""`gateway serve` starts the embedded store once in the parent process and tells its uvicorn
workers (and its worker process) where it is through this variable, so they share one server."""
CONFIG_ENV = "GATEWAY_CONFIG"
LOG_LEVEL_ENV = "GATEWAY_LOG_LEVEL"
WORKER_ENV = "GATEWAY_WORKER"
"""Set by `gateway serve` for its serving processes: a worker process runs beside them."""
PARENT_ENV = "GATEWAY_WORKER_PARENT"
"""Set for a worker child: the pid of the `gateway serve` that started it."""


def store_url(config: Config) -> tuple[str, EmbeddedRedis | None]:
    """Where the store is, starting the embedded server if this process must."""
    if os.environ.get(STORE_URL_ENV):
        return os.environ[STORE_URL_ENV], None
    if config.store != "embedded":
        return config.store, None
    embedded = EmbeddedRedis(config.server.data_dir)
    embedded.start()
    return embedded.url, embedded


def routing_upstream(config: Config) -> RoutingUpstream:
    """The fake upstream in-process; the direct client's pool if a model speaks the OpenAI
    chat API; litellm (a slow import) only if a model needs it, and then at start-up rather
    than on the first request. The caller closes it (`aclose`)."""
    models = [m for t in config.tenants.values() for m in t.models.values()
              if not m.model.startswith(FAKE_PREFIX)]
    direct_models = [openai_endpoint(m.model, m.api_base, m.litellm_params) is not None
                     for m in models]
    direct = litellm = None
    # The pool serves the Anthropic door's pass-through to `anthropic/` routes too.
    if any(direct_models) or any(anthropic_endpoint(m.model, m.api_base, m.litellm_params)
                                 for m in models):
        from gateway.upstream.direct import DirectUpstream

        direct = DirectUpstream()
    if not all(direct_models):
        from gateway.upstream.litellm_upstream import LitellmUpstream

        litellm = LitellmUpstream()
    return RoutingUpstream(direct=direct, litellm=litellm)


def build_recorder(config: Config, client: aioredis.Redis,
                   jobs: JobMetrics | None = None, *,
                   encryption: Encryption = NO_ENCRYPTION,
                   transcripts: TranscriptCache | None = None) -> Recorder | ShardedRecorder:
    """One Redis: a `Recorder` of the one record stream; a cluster: one per shard's stream.
    `transcripts`: the process's cache of decoded transcripts (none: each recorder its own)."""
    r = config.recorder
    options: dict[str, Any] = {
        "workers": r.workers, "max_attempts": r.max_attempts,
        "backoff_seconds": r.backoff_seconds,
        "claim_idle_ms": int(r.claim_idle_seconds * 1000), "jobs": jobs,
        "encryption": encryption, "transcripts": transcripts}
    keys = key_space(config)
    if keys.cluster:
        return ShardedRecorder(client, keys, **options)
    return Recorder(client, keys, **options)


def recorder_mode(config: Config) -> str:
    """Where a serving process's recorded turns are applied. `process` means a worker process
    that `gateway serve` starts; an app built any other way (uvicorn, tests) has none beside it
    and applies them on its own loop instead, and says so — a turn is never left unapplied."""
    mode = config.recorder.mode
    if mode == "process" and not os.environ.get(WORKER_ENV):
        logger.info(json.dumps({"event": "recorder_on_serving_loop",
                                "reason": "recorder.mode is process but no worker process was "
                                          "started beside this app (gateway serve starts one)"}))
        return "background"
    return mode


async def step(name: str, work: Awaitable[Any], timeout: float = 10.0) -> None:
    """One shutdown step, bounded by `timeout` (+1 s for a step that bounds itself by it to
    finish): its failure or overrun is logged and the next step runs."""
    try:
        await asyncio.wait_for(work, timeout + 1)  # a hung store too
    except Exception as exc:  # noqa: BLE001 — shutdown must finish; each failure is logged
        logger.warning(json.dumps({"event": "shutdown_step_failed", "step": name,
                                   "error": repr(exc)}))


@dataclass
class Background:
    """The recorder and the memory worker of one process, started and drained together."""

    recorder: Recorder | ShardedRecorder
    memory: MemoryRuntime | None

    async def start(self) -> None:
        await self.recorder.start()
        if self.memory is not None:
            await self.memory.worker.start()

    async def drain(self, timeout: float, claim_idle_seconds: float) -> None:
        """Apply what is queued now (each step bounded by `timeout`), then leave the consumer
        group tidy. Every step tolerates a store that is gone: it logs and the next runs."""
        await step("recorder", self.recorder.drain(timeout), timeout)
        await step("recorder consumers", self.recorder.remove_consumers(
            stale_after_ms=max(60_000, 4 * int(claim_idle_seconds * 1000))), timeout)
        if self.memory is not None:
            await step("memory worker", self.memory.worker.drain(timeout), timeout)


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


@dataclass
class Services:
    """What a process of the gateway runs on, built by `open_services`."""

    redis: aioredis.Redis
    """The store's client: calls give up after the store timeout (the request path then goes
    on without memory)."""
    encryption: Encryption
    tenants: TenantDirectory
    tracing: Tracing | None
    memory: MemoryRuntime | None
    """None unless some tenant has memory enabled."""
    jobs: JobMetrics | None
    """Job latency and retries, counted where turns are applied and memory derived."""
    recorder: Recorder | ShardedRecorder | None
    """The recorder, where this process applies turns; not started (`start_background`)."""
    transcripts: TranscriptCache
    """The process's decoded transcripts, one cache for every reader of them (the recorder,
    memory's store, the serving store): a conversation's messages are held and decoded once."""
    background: Background | None = None

    async def start_background(self) -> None:
        """Apply turns and derive memory on this process's loop until the services close."""
        assert self.recorder is not None, "open_services(applies_turns=True) builds the recorder"
        self.background = Background(self.recorder, self.memory)
        await self.background.start()


@contextlib.asynccontextmanager
async def open_services(config: Config, url: str, upstream: Upstream, *, applies_turns: bool,
                        max_connections: int | None = None, note_embedder: bool = False,
                        span_exporter: SpanExporter | None = None,
                        embedder: Embedder | None = None) -> AsyncIterator[Services]:
    """Connect to the store at `url`, load the tenants' keys (a wrong or missing one raises
    ConfigError naming the config key), start tracing (`span_exporter` replaces OTLP: tests),
    build memory (with `embedder` instead of the configured one, if given) and warm its
    embedder up, and — where this process `applies_turns` — the
    recorder, on a connection of its own (its blocking reads outlast any socket timeout).

    While open, the process's free C-allocator memory goes back to the system every
    `server.malloc_trim_seconds` (gateway/ops/allocator.py).

    On exit, in order: the background work drains (if started), memory closes, the store's
    connections close, the last spans go out, the trimming stops. `upstream` belongs to the
    caller."""
    timeout = config.server.store_timeout_seconds
    cluster = config.store_cluster.enabled
    pool = {"max_connections": max_connections} if max_connections else {}
    redis = connect(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                    cluster=cluster, **pool)
    async with contextlib.AsyncExitStack() as stack:
        trimmer = start_trimmer(config.server.malloc_trim_seconds)
        if trimmer is not None:
            stack.callback(trimmer.stop)
        stack.push_async_callback(lambda: step("store connection", redis.aclose(), timeout))
        encryption = await load_encryption(config, redis)
        transcripts = TranscriptCache(encryption=encryption)
        recorder = jobs = None
        if applies_turns:
            recorder_redis = connect(url, socket_connect_timeout=timeout, cluster=cluster)
            stack.push_async_callback(lambda: step("recorder store connection",
                                                   recorder_redis.aclose(), timeout))
            jobs = JobMetrics(redis)  # for every replica's /metrics
            recorder = build_recorder(config, recorder_redis, jobs, encryption=encryption,
                                      transcripts=transcripts)
        tracing = start_tracing(config.tracing, span_exporter)
        if tracing is not None:  # the last spans out (a blocking export: off the loop)
            stack.push_async_callback(anyio.to_thread.run_sync, tracing.shutdown)
        tenants = TenantDirectory(config)
        memory = None
        if any(t.memory.enabled for t in config.tenants.values()):
            memory = build_memory(config, redis, upstream, tenants, tracing=tracing,
                                  jobs=jobs, encryption=encryption, embedder=embedder,
                                  transcripts=transcripts)
            stack.callback(memory.close)
            await memory.embedding.warm_up()
            if note_embedder:
                await _note_embedder(redis, memory)
        services = Services(redis, encryption, tenants, tracing, memory, jobs, recorder,
                            transcripts)

        async def drain_background() -> None:
            if services.background is not None:
                await services.background.drain(config.recorder.drain_timeout_seconds,
                                                config.recorder.claim_idle_seconds)
        stack.push_async_callback(drain_background)
        yield services


async def _note_embedder(redis: aioredis.Redis, memory: MemoryRuntime) -> None:
    """Warn when the embedder changed since the last start: the store's vectors of the old one
    are not searched (their items are recalled lexically) until `gateway reindex` runs."""
    from redis.exceptions import RedisError

    from gateway.memory.jobs.reindex import note_embedder
    from gateway.memory.records.keys import MemoryKeySpace

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
