"""OpenTelemetry tracing: a span per request with its steps, and a span per memory job.

Off by default (`tracing.enabled: false`), and then free: this module imports nothing of
OpenTelemetry at import time, `start_tracing` returns None, the pipeline and the memory worker
hold None and make no tracer call. The packages are the optional `otel` extra.

On, each process (every serving worker, and the worker process) has its own tracer provider,
exporting over OTLP/HTTP from a background thread (BatchSpanProcessor: the event loop only
queues finished spans). No global provider is installed: the tracer is passed in.

Request spans are made when the request finishes (`Tracing.request`), from the times the
request log took anyway (`RequestLog.steps`): `gateway.chat_completion` with the children
`gateway.load`, `gateway.recall`, `gateway.rewrite`, `gateway.upstream`, `gateway.record` —
so the request path carries no span objects across its awaits, streams included, and the
spans agree with the log line to the microsecond. A client's W3C `traceparent` becomes the
parent of the request span. Memory jobs (`gateway.memory` with `memory.embed`,
`memory.summarise`, `memory.user_index`, `memory.extract`) are spans of their own traces,
joined to their requests by `session.id` (the conversation id).
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any, Iterator, Mapping

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

    from gateway.config import TracingConfig
    from gateway.core.ids import ConversationKey
    from gateway.ops.observability import RequestLog

JOB_SPANS = {"turn_index": "memory.embed", "compaction": "memory.summarise",
             "topics": "memory.topics", "user_index": "memory.user_index",
             "knowledge": "memory.extract"}
"""The span name of each memory processor (gateway/memory/runtime.py)."""


def start_tracing(config: TracingConfig, exporter: SpanExporter | None = None, *,
                  batch: bool | None = None) -> Tracing | None:
    """This process's tracing, or None when it is off. `exporter` replaces OTLP (tests: the
    SDK's in-memory exporter). `batch`: export from a background thread (the default for
    OTLP) rather than as each span ends (the default for a given exporter, so that a test
    reads spans at once)."""
    if not config.enabled:
        return None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    provider = TracerProvider(resource=Resource.create({"service.name": config.service_name}),
                              sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)))
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.util.re import parse_env_headers

        raw = config.headers()
        headers = parse_env_headers(raw, liberal=True) if raw else None
        exporter = OTLPSpanExporter(endpoint=config.endpoint, headers=headers)
        batch = True if batch is None else batch
    processor = BatchSpanProcessor if batch else SimpleSpanProcessor
    provider.add_span_processor(processor(exporter))
    return Tracing(provider)


class Tracing:
    """One process's tracer provider, and the spans the gateway makes with it."""

    def __init__(self, provider: TracerProvider):
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind, Status, StatusCode
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._provider = provider
        self._tracer = provider.get_tracer("context-gateway")
        self._in_context = trace.set_span_in_context
        self._server = SpanKind.SERVER
        self._error = lambda message: Status(StatusCode.ERROR, message)
        self._propagator = TraceContextTextMapPropagator()

    def request(self, log: RequestLog) -> None:
        """The spans of a finished request, from its log (times, ids, token counts)."""
        offset = time.time_ns() - time.perf_counter_ns()

        def ns(seconds: float) -> int:  # perf_counter seconds -> epoch nanoseconds
            return int(seconds * 1e9) + offset

        parent = (self._propagator.extract({"traceparent": log.traceparent})
                  if log.traceparent else None)
        span = self._tracer.start_span("gateway.chat_completion", context=parent,
                                       kind=self._server, start_time=ns(log.started),
                                       attributes=_request_attributes(log))
        inside = self._in_context(span)
        for name, (started, ended) in log.steps.items():
            step = self._tracer.start_span(f"gateway.{name}", context=inside,
                                           start_time=ns(started),
                                           attributes=_step_attributes(name, log))
            step.end(end_time=ns(ended))
        if log.status >= 500:
            span.set_status(self._error(log.error or f"HTTP {log.status}"))
        total = log.total_ms if log.total_ms is not None else log.since_start_ms()
        span.end(end_time=ns(log.started + total / 1000))

    @contextlib.contextmanager
    def job(self, name: str, key: ConversationKey, **attributes: Any) -> Iterator[None]:
        """A span around one memory job of one conversation (nested jobs become children);
        an exception is recorded on it and propagates."""
        with self._tracer.start_as_current_span(
                name, attributes={**_identity(key.tenant, key.user, key.conversation),
                                  **attributes}):
            yield

    def shutdown(self) -> None:
        """Export what is queued, then stop (bounded by the SDK's own export timeout)."""
        self._provider.shutdown()


def job_span(tracing: Tracing | None, name: str, key: ConversationKey,
             **attributes: Any) -> contextlib.AbstractContextManager[None]:
    """`tracing.job(...)`, or nothing when tracing is off."""
    if tracing is None:
        return contextlib.nullcontext()
    return tracing.job(name, key, **attributes)


def _identity(tenant: str | None, user: str | None,
              conversation: str | None) -> dict[str, str]:
    """session.id and user.id as Langfuse (and OpenTelemetry's conventions) read them."""
    out = {}
    if conversation is not None:
        out["session.id"] = conversation
    if user is not None:
        out["user.id"] = user
    if tenant is not None:
        out["gateway.tenant"] = tenant
    return out


def _request_attributes(log: RequestLog) -> dict[str, Any]:
    out: dict[str, Any] = {**_identity(log.tenant, log.user, log.conversation),
                           "gateway.request_id": log.request_id, "gateway.stream": log.stream,
                           "http.response.status_code": log.status}
    optional = {"gen_ai.request.model": log.model,
                "gateway.tokens.original": log.tokens_original,
                "gateway.tokens.forwarded": log.tokens_forwarded,
                "gateway.reconcile": log.reconcile, "gateway.recalled": log.recalled,
                "gateway.one_shot_messages": log.one_shot_messages,
                "gateway.passthrough": log.passthrough, "gateway.persisted": log.persisted,
                "gateway.memory_error": log.memory_error, "gateway.error": log.error}
    out.update({k: v for k, v in optional.items() if v is not None})
    return out


def _step_attributes(name: str, log: RequestLog) -> dict[str, Any] | None:
    """The upstream step is the model call: model and token counts where the GenAI
    conventions (and Langfuse's generation view) look for them."""
    if name != "upstream":
        return None
    out: dict[str, Any] = {}
    if log.model is not None:
        out["gen_ai.request.model"] = log.model
    usage: Mapping[str, Any] = log.usage or {}
    for ours, theirs in (("gen_ai.usage.input_tokens", "prompt_tokens"),
                         ("gen_ai.usage.output_tokens", "completion_tokens")):
        if isinstance(usage.get(theirs), int):
            out[ours] = usage[theirs]
    if "gen_ai.usage.input_tokens" not in out and log.tokens_forwarded is not None:
        out["gateway.tokens.forwarded"] = log.tokens_forwarded
    return out
