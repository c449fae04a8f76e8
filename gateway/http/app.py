"""The ASGI application: the lifespan opens the process's services (gateway/wiring.py), builds
the pipeline and the handlers' state on them, and drains it all at shutdown."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from typing import TYPE_CHECKING, Any, AsyncIterator

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from gateway.config import Config, load_config
from gateway.errors import GatewayError
from gateway.http.admin import AdminKeys
from gateway.http.anthropic import anthropic_routes
from gateway.http.console import console_routes
from gateway.http.responses import responses_routes
from gateway.http.routes import (
    on_client_disconnect,
    on_gateway_error,
    on_http_exception,
    on_unexpected,
    routes,
)
from gateway.http.state import Gateway
from gateway.ops.logs import configure_logging
from gateway.ops.observability import Metrics
from gateway.pipeline.brief import serving_briefs
from gateway.pipeline.chat import Pipeline
from gateway.pipeline.ratelimit import RateLimiter
from gateway.pipeline.record_buffer import RecordBuffer
from gateway.pipeline.record_journal import RecordJournal
from gateway.pipeline.request_history import RequestHistory
from gateway.pipeline.responses import ResponseChains
from gateway.pipeline.tasks import TaskTracker
from gateway.memory.ports import Embedder
from gateway.ports import Upstream
from gateway.store.cluster import key_space
from gateway.store.disk import DiskRewrites
from gateway.store.redis_store import RedisStore
from gateway.store.responses import ResponseLog
from gateway.tokenizer import tokenizer_for_model
from gateway.upstream.prices import route_prices
from gateway.wiring import (
    CONFIG_ENV,
    LOG_LEVEL_ENV,
    InlineProcessing,
    Services,
    open_services,
    recorder_mode,
    routing_upstream,
    step,
    store_url,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

logger = logging.getLogger("gateway")


def create_app(config: Config, *, upstream: Upstream | None = None,
               span_exporter: SpanExporter | None = None,
               embedder: Embedder | None = None) -> Starlette:
    """Build the app. `upstream` replaces the default routing upstream (tests);
    `span_exporter` replaces OTLP when `tracing.enabled` (tests: an in-memory exporter);
    `embedder` replaces the configured one (benchmarks: vectors read from a cache)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Starting the embedded server blocks (a subprocess and its readiness wait).
        url, embedded = await anyio.to_thread.run_sync(store_url, config)
        mode = recorder_mode(config)
        routed = None if upstream else routing_upstream(config)
        chat_upstream = upstream or routed
        journal = services = None
        try:
            async with open_services(config, url, chat_upstream,
                                     applies_turns=mode in ("inline", "background"),
                                     max_connections=config.server.store_pool_size,
                                     note_embedder=True, span_exporter=span_exporter,
                                     embedder=embedder) as services:
                async with _serving(app, config, services, chat_upstream, mode) as journal:
                    yield
        finally:
            if routed is not None:
                await step("upstream connections", routed.aclose(),
                           config.server.store_timeout_seconds)
            if embedded is not None:
                await anyio.to_thread.run_sync(embedded.stop)
            if journal is not None and services is not None:
                recorder, buffer = services.recorder, app.state.gateway.buffer
                logger.info(json.dumps({
                    "event": "shutdown_complete",
                    "recorder_applied": recorder.applied if recorder else None,
                    "buffer_flushed": buffer.flushed, "buffer_dropped": buffer.dropped,
                    "journal_replayed": journal.replayed, "journal_spilled": journal.spilled}))

    exception_handlers: dict[Any, Any] = {
        HTTPException: on_http_exception,
        GatewayError: on_gateway_error,
        ClientDisconnect: on_client_disconnect,
        Exception: on_unexpected,
    }
    # The console's pages exist only when it is enabled (404 otherwise, like any unknown path).
    served = [*routes, *anthropic_routes, *responses_routes,
              *(console_routes() if config.console.enabled else [])]
    return Starlette(routes=served, lifespan=lifespan, exception_handlers=exception_handlers)


@contextlib.asynccontextmanager
async def _serving(app: Starlette, config: Config, services: Services, upstream: Upstream,
                   mode: str) -> AsyncIterator[RecordJournal]:
    """The serving side on top of the services: the pipeline, the record buffer and its
    journal (yielded, for the shutdown's figures), the request history, and
    `app.state.gateway` for the handlers."""
    redis, memory, recorder = services.redis, services.memory, services.recorder
    store = RedisStore(redis, key_space(config), cache=services.transcripts,
                       encryption=services.encryption)
    tasks, metrics = TaskTracker(), Metrics()
    buffer = RecordBuffer(store, config.recorder.buffer_capacity,
                          retry_max_seconds=config.recorder.buffer_retry_max_seconds)
    limiter = RateLimiter(config, redis, store.keys, metrics)
    inline = InlineProcessing(recorder, memory) if mode == "inline" and recorder else None
    history = RequestHistory(
        redis, store.keys, max_entries=config.console.request_log_entries,
        last_ttl_seconds=config.console.last_request_ttl_seconds,
    ) if config.console.enabled else None
    pipeline = Pipeline(store=store, upstream=upstream,
                        tokenizer_for=tokenizer_for_model, tasks=tasks, metrics=metrics,
                        inline_recorder=inline,
                        memory=memory.service if memory else None,
                        recall_settings=memory.recall if memory else None, buffer=buffer,
                        tracing=services.tracing, limiter=limiter, history=history,
                        prices=route_prices(config),
                        briefs=serving_briefs(config, redis, store) if memory else None)
    disk = DiskRewrites(redis, store.keys.disk_rewrite_owed())
    app.state.gateway = Gateway(config, services.tenants, AdminKeys(config), limiter, pipeline,
                                store, recorder, metrics, memory, buffer,
                                store_pool=getattr(redis, "gate", None)
                                or getattr(redis, "connection_pool", None),
                                history=history, disk=disk,
                                responses=ResponseChains(ResponseLog(
                                    redis, store.keys, encryption=services.encryption)))
    await disk.resume()  # a rewrite an earlier process owed after a delete (in the background)
    if history is not None:
        await history.start()
    # Turns a previous process could not hand to the store go first, then new ones.
    journal = RecordJournal(config.server.data_dir, encryption=services.encryption)
    await journal.replay_into(buffer)
    await buffer.start()
    if mode == "background" and recorder is not None:
        await services.start_background()
    try:
        yield journal
    finally:
        # uvicorn runs this once it has stopped accepting and in-flight requests have
        # finished (or server.shutdown_timeout_seconds passed). Order: the turns of those
        # requests (stream records finishing in the background), then the buffer into the
        # store — what it does not take in time into the journal, on disk — then the
        # services close (gateway/wiring.py: background mode's recorder applies what it can,
        # memory, the store's connections, tracing); with a worker process, `gateway serve`
        # stops it after this. Every step is bounded by the drain timeout (a close by the
        # store timeout) and tolerates a store that is gone: it logs and shutdown goes on —
        # turns already enqueued are in the store.
        drain = config.recorder.drain_timeout_seconds
        # A rewrite still owed stays marked in the store: the next process resumes it.
        await step("disk rewrites", disk.aclose(), drain)
        await step("background tasks", tasks.drain(drain), drain)
        if history is not None:  # after the tasks: streams log their requests last
            await step("request history", history.drain(drain), drain)
        await journal.close(await buffer.drain(drain))


def app_from_env() -> Starlette:
    """Factory for uvicorn workers: `uvicorn --factory gateway.http.app:app_from_env`."""
    config = load_config(os.environ.get(CONFIG_ENV, "config.yaml"))
    # Worker processes start fresh: give them the same one-line-per-record log output.
    configure_logging(os.environ.get(LOG_LEVEL_ENV, "info"), config.server.log_format)
    return create_app(config)
