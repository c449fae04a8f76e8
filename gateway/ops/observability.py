"""What operators see: one JSON log line per request, `x-gateway-*` headers, Prometheus metrics."""

from __future__ import annotations

import logging
import re
import time
import uuid
from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gateway.ops.job_metrics import StoredJobMetrics
from gateway.ops.logs import JsonMessage

request_logger = logging.getLogger("gateway.request")


class PoolStats(Protocol):
    """What the store's connection pool reports (gateway/store/pool.py's `PoolStats`)."""

    max_connections: int
    in_use: int
    waits: int
    timeouts: int


@dataclass
class RequestLog:
    """The facts of one request, filled in as it goes and emitted once at the end."""

    request_id: str
    started: float = field(default_factory=time.perf_counter)
    tenant: str | None = None
    user: str | None = None
    conversation: str | None = None
    model: str | None = None
    stream: bool = False
    status: int = 200
    reconcile: str | None = None
    tokens_original: int | None = None
    tokens_forwarded: int | None = None
    tokens_completion: int | None = None
    """The upstream's `usage.completion_tokens`; counted here for a rate-limited stream."""
    tokens_prompt: int | None = None
    """The upstream's `usage.prompt_tokens` (its own count of the forwarded prompt)."""
    tokens_cached: int | None = None
    """Of those, read from the provider's prompt cache."""
    tokens_cache_write: int | None = None
    """Of those, written to the provider's prompt cache (Anthropic); set when not 0."""
    spend: float | None = None
    """What the request cost at its model's price (null: unknown price, or no usage)."""
    whole_cost: float | None = None
    """What sending the client's whole (unrewritten) history would have cost at the same
    prices (docs/operating.md#usage-and-spend)."""
    recent_turns: int | None = None
    stable_messages: int | None = None
    """Leading messages of the forwarded prompt that are its stable prefix (the next request
    repeats them unless a step or memory changes them; a cache breakpoint goes at their end);
    None: only its system messages (the rolling window)."""
    truncated: int | None = None
    over_budget: bool | None = None
    tool_results_cleared: int | None = None
    """A compacted tool loop's results forwarded as placeholders (set when it was compacted)."""
    exchanges_dropped: int | None = None
    """A compacted tool loop's exchanges left out."""
    persisted: bool | None = None
    record_buffered: bool | None = None
    """The turn waits in the in-process record buffer (the store could not take it)."""
    recalled: int | None = None
    """Memory items (older turns, chunks, facts) forwarded in the recalled block."""
    summary_chunks: int | None = None
    memory_tokens: dict[str, int] | None = None
    """Tokens each memory layer used: summary, profile, recalled."""
    brief_tokens: int | None = None
    """Tokens of the conversation's memory brief forwarded (set when the tenant makes briefs:
    0 when none was forwarded)."""
    memory_error: str | None = None
    pinned: int | None = None
    """Pinned messages forwarded in the pinned block (set when the conversation has pins)."""
    pins_marked: int | None = None
    """Messages this request pinned with the client's marker (stored)."""
    topic: str | None = None
    """The conversation's current topic label (topics tracked, and a label known)."""
    topic_segment: int | None = None
    """Its index: 0 for the conversation's first topic, 1 after the first switch..."""
    one_shot_messages: int | None = None
    """Messages forwarded in this request and stored only as placeholders (one-shot)."""
    passthrough: str | None = None
    """Why the request was forwarded without memory (no_conversation_id, store_unavailable)."""
    error: str | None = None
    load_ms: float | None = None
    recall_ms: float | None = None
    rewrite_ms: float | None = None
    upstream_ms: float | None = None
    """Until the upstream's answer (streaming: its first chunk)."""
    total_ms: float | None = None
    # Not logged (see _NOT_LOGGED): what tracing makes spans from, when it is on.
    steps: dict[str, tuple[float, float]] = field(default_factory=dict)
    """(start, end) in perf_counter seconds of each step: load, recall, rewrite, upstream,
    record — the same measurements as the *_ms fields."""
    traceparent: str | None = None
    """The client's W3C `traceparent`, kept only when tracing is on."""
    usage: Mapping[str, Any] | None = None
    """The upstream's own token usage, when its answer carried one."""
    memory_blocks: tuple[str, ...] | None = None
    """The memory blocks forwarded (summary, profile, recalled); set when the request
    history is kept (`console.enabled`), like the next one."""
    recalled_items: tuple[tuple[str, str, float], ...] | None = None
    """(kind, id, score) of each recalled item forwarded, in the order shown."""

    def step(self, name: str, started: float) -> float:
        """Note that step `name` ran from `started` (perf_counter) until now; its duration
        in milliseconds (what the *_ms field of the step is set to)."""
        ended = time.perf_counter()
        self.steps[name] = (started, ended)
        return (ended - started) * 1000

    def since_start_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000

    @property
    def overhead_ms(self) -> float:
        """Time the gateway spent before handing the request upstream."""
        return round((self.load_ms or 0) + (self.recall_ms or 0) + (self.rewrite_ms or 0), 3)

    def headers(self) -> dict[str, str]:
        out = {"x-gateway-request-id": self.request_id, "x-request-id": self.request_id,
               "x-gateway-overhead-ms": f"{self.overhead_ms:.3f}"}
        if self.tokens_original is not None:
            out["x-gateway-tokens-original"] = str(self.tokens_original)
        if self.tokens_forwarded is not None:
            out["x-gateway-tokens-forwarded"] = str(self.tokens_forwarded)
        if self.stable_messages is not None:
            out["x-gateway-stable-messages"] = str(self.stable_messages)
        if self.recalled is not None:
            out["x-gateway-memory-recalled"] = str(self.recalled)
        if self.brief_tokens is not None:
            out["x-gateway-brief-tokens"] = str(self.brief_tokens)
        if self.pinned is not None:
            out["x-gateway-memory-pinned"] = str(self.pinned)
        if self.topic:
            out["x-gateway-topic"] = header_text(self.topic)
        if self.passthrough:
            out["x-gateway-passthrough"] = self.passthrough
        if self.memory_error:
            # Memory could not be read and the request went on without it (fail open): say
            # so, in ASCII (a header value), without the details the log line has.
            out["x-gateway-memory-error"] = self.memory_error.split("(", 1)[0][:80].encode(
                "ascii", "replace").decode("ascii")
        return out

    def emit(self) -> None:
        self.total_ms = round(self.since_start_ms(), 3)
        record = {"time": round(time.time(), 3), "event": "chat_completion"}
        record.update({k: (round(v, 9 if k in _MONEY else 3) if isinstance(v, float) else v)
                       for k in _LOGGED if (v := getattr(self, k)) is not None})
        record["overhead_ms"] = self.overhead_ms
        level = logging.WARNING if self.status >= 500 else logging.INFO
        request_logger.log(level, JsonMessage(record))


_TOKEN_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                        "!#$&+-.^_`|~")
"""RFC 8187's attr-char: what an ext-value leaves unescaped."""


def header_text(text: str) -> str:
    """`text` as a header value, which must be ASCII: printable ASCII as it is; anything else
    as an RFC 8187 ext-value, `UTF-8''` and the UTF-8 bytes percent-encoded except attr-chars
    ("北京 天气" -> `UTF-8''%E5%8C%97%E4%BA%AC%20%E5%A4%A9%E6%B0%94`; Python reads it back
    with `urllib.parse.unquote(value.removeprefix("UTF-8''"))`)."""
    if text.isascii() and text.isprintable() and not text.startswith("UTF-8''"):
        return text
    return "UTF-8''" + "".join(chr(b) if chr(b) in _TOKEN_SAFE else f"%{b:02X}"
                               for b in text.encode("utf-8"))


_NOT_LOGGED = frozenset({"started", "steps", "traceparent", "usage", "memory_blocks",
                         "recalled_items"})
_MONEY = frozenset({"spend", "whole_cost"})
"""Logged to 1e-9 (the counters' unit), not rounded as durations are."""
_LOGGED = tuple(f.name for f in fields(RequestLog) if f.name not in _NOT_LOGGED)


class Metrics:
    """The gateway's Prometheus metrics, on a registry of its own (no global state)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("gateway_requests_total", "Chat completion requests.",
                                ["tenant", "status", "stream"], registry=self.registry)
        self.passthrough = Counter("gateway_passthrough_total",
                                   "Requests forwarded without memory, by reason.",
                                   ["reason"], registry=self.registry)
        self.latency = Histogram("gateway_request_seconds", "Total request latency.",
                                 registry=self.registry)
        self.off_loop_steps = Counter("gateway_off_loop_steps_total",
                                      "Steps of large requests run on a worker thread instead "
                                      "of the serving loop (gateway/pipeline/off_loop.py).",
                                      ["step"], registry=self.registry)
        self.in_flight = Gauge("gateway_requests_in_flight",
                               "Chat requests (the three doors) this process is serving now "
                               "(a stream until its response starts; counted by "
                               "gateway/pipeline/off_loop.py).",
                               registry=self.registry)
        self.off_loop_yields = Counter("gateway_off_loop_yields_total",
                                       "Waits of a large request on the serving loop after a "
                                       "step run off it, while other requests were in flight "
                                       "(gateway/pipeline/off_loop.py).",
                                       ["step"], registry=self.registry)
        self.overhead = Histogram("gateway_overhead_seconds",
                                  "Time spent before the upstream call.",
                                  buckets=(.0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1),
                                  registry=self.registry)
        self.tokens_original = Counter("gateway_tokens_original_total",
                                       "Prompt tokens of the full conversations.",
                                       registry=self.registry)
        self.tokens_forwarded = Counter("gateway_tokens_forwarded_total",
                                        "Prompt tokens forwarded upstream.",
                                        registry=self.registry)
        # Usage and spend by tenant, from the upstream's `usage` (docs/operating.md).
        self.usage_tokens = Counter("gateway_usage_tokens_total",
                                    "Tokens by tenant and kind: original (the client's whole "
                                    "history), forwarded (after the rewrite), prompt (the "
                                    "upstream's count), cached (read from its prompt cache), "
                                    "cache_write, completion.", ["tenant", "kind"],
                                    registry=self.registry)
        self.spend = Counter("gateway_spend_total",
                             "What requests cost at their models' prices (priced requests "
                             "only), by tenant.", ["tenant"], registry=self.registry)
        self.whole_cost = Counter("gateway_whole_history_cost_total",
                                  "What the same priced requests would have cost with the "
                                  "client's whole history, by tenant.", ["tenant"],
                                  registry=self.registry)
        self.unpriced = Counter("gateway_unpriced_requests_total",
                                "Requests with the upstream's usage but no spend (the "
                                "model's price is unknown), by tenant.",
                                ["tenant"], registry=self.registry)
        self.record_failures = Counter("gateway_record_enqueue_failures_total",
                                       "Turns that could not be enqueued for recording.",
                                       registry=self.registry)
        self.recorder_applied = Gauge("gateway_recorder_applied", "Turns applied by this process.",
                                      registry=self.registry)
        self.recorder_dead = Gauge("gateway_recorder_dead_lettered",
                                   "Turns dead-lettered by this process.", registry=self.registry)
        # The shared queues, read from the store at each scrape: the same figures on every
        # replica, whichever process (a worker process, another replica) does the work.
        self.record_queue_length = Gauge("gateway_record_queue_length",
                                         "Entries in the record stream (trimmed as applied).",
                                         registry=self.registry)
        self.record_queue_pending = Gauge("gateway_record_queue_pending",
                                          "Record jobs delivered to a recorder and not yet "
                                          "acknowledged.", registry=self.registry)
        self.record_queue_lag = Gauge("gateway_record_queue_lag",
                                      "Record jobs not yet delivered to any recorder.",
                                      registry=self.registry)
        self.record_dead_letters = Gauge("gateway_record_dead_letters",
                                         "Record jobs dead-lettered, ever.",
                                         registry=self.registry)
        self.memory_queue = Gauge("gateway_memory_queue_conversations",
                                  "Conversations waiting for the memory worker.",
                                  registry=self.registry)
        self.memory_dead_letters = Gauge("gateway_memory_dead_letters",
                                         "Conversations whose memory processing was "
                                         "dead-lettered, ever.", registry=self.registry)
        self.rate_limited = Counter("gateway_rate_limited_total",
                                    "Requests refused with 429 by a rate limit, by tenant and "
                                    "kind (requests, tokens).", ["tenant", "kind"],
                                    registry=self.registry)
        self.store_unavailable = Counter("gateway_store_unavailable_total",
                                         "Store operations that failed (the request went on "
                                         "without the store), by operation.",
                                         ["operation"], registry=self.registry)
        self.buffer_held = Gauge("gateway_record_buffer_turns",
                                 "Turns held in process until the store takes them.",
                                 registry=self.registry)
        self.buffer_buffered = Gauge("gateway_record_buffer_buffered",
                                     "Turns this process ever put in its record buffer.",
                                     registry=self.registry)
        self.buffer_flushed = Gauge("gateway_record_buffer_flushed",
                                    "Buffered turns this process enqueued once the store was back.",
                                    registry=self.registry)
        self.buffer_dropped = Gauge("gateway_record_buffer_dropped",
                                    "Buffered turns this process gave up on (buffer full, a "
                                    "failing turn, or left at shutdown): lost turns.",
                                    registry=self.registry)

        # Worker job latency and retries, from the store (gateway/ops/job_metrics.py).
        self.jobs = StoredJobMetrics()
        self.registry.register(self.jobs)

        self.pool_in_use = Gauge("gateway_store_pool_in_use",
                                 "Store connections of this process in use now.",
                                 registry=self.registry)
        self.pool_max = Gauge("gateway_store_pool_max_connections",
                              "Store connections this process may open (server.store_pool_size).",
                              registry=self.registry)
        self.pool_waits = Gauge("gateway_store_pool_waits",
                                "Store calls of this process that waited for a free connection "
                                "(the pool was saturated).", registry=self.registry)
        self.pool_timeouts = Gauge("gateway_store_pool_wait_timeouts",
                                   "Store calls of this process that found no free connection "
                                   "within the store timeout.", registry=self.registry)

        self.index_bytes = Gauge("gateway_memory_index_bytes",
                                 "Search indexes this process holds in memory, estimated "
                                 "bytes, by index (dense, lexical); bounded by "
                                 "memory.index.cache_mb.", ["index"], registry=self.registry)
        self.index_evictions = Gauge(
            "gateway_memory_index_evictions", "Namespaces this process's search indexes "
            "dropped to stay within memory.index.cache_mb so far, by index: rising with every "
            "request means the budget is below what the users searched need (each drop is a "
            "rebuild from the store at the next search).", ["index"], registry=self.registry)
        self.transcript_cache_bytes = Gauge(
            "gateway_transcript_cache_bytes", "Decoded transcripts this process keeps in "
            "memory (live and archived parts), estimated bytes; bounded (least recently used "
            "conversations leave first).", registry=self.registry)

    def observe_pool(self, stats: PoolStats) -> None:
        self.pool_in_use.set(stats.in_use)
        self.pool_max.set(stats.max_connections)
        self.pool_waits.set(stats.waits)
        self.pool_timeouts.set(stats.timeouts)

    def observe(self, log: RequestLog) -> None:
        self.requests.labels(log.tenant or "-", str(log.status), str(log.stream).lower()).inc()
        if log.passthrough:
            self.passthrough.labels(log.passthrough).inc()
            if log.passthrough == "store_unavailable":
                self.store_unavailable.labels("load").inc()
        if log.total_ms is not None:
            self.latency.observe(log.total_ms / 1000)
        self.overhead.observe(log.overhead_ms / 1000)
        if log.tokens_original is not None:
            self.tokens_original.inc(log.tokens_original)
        if log.tokens_forwarded is not None:
            self.tokens_forwarded.inc(log.tokens_forwarded)
        if log.tokens_prompt is not None:  # the upstream's usage was read
            self._observe_usage(log)

    def _observe_usage(self, log: RequestLog) -> None:
        tenant = log.tenant or "-"
        for kind, value in (("original", log.tokens_original),
                            ("forwarded", log.tokens_forwarded), ("prompt", log.tokens_prompt),
                            ("cached", log.tokens_cached),
                            ("cache_write", log.tokens_cache_write),
                            ("completion", log.tokens_completion)):
            if value:
                self.usage_tokens.labels(tenant, kind).inc(value)
        if log.spend is None or log.whole_cost is None:
            self.unpriced.labels(tenant).inc()
        else:
            self.spend.labels(tenant).inc(log.spend)
            self.whole_cost.labels(tenant).inc(log.whole_cost)


_REQUEST_ID = re.compile(r"[A-Za-z0-9._:/+=-]{1,128}")
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")


def request_id(headers: Mapping[str, str]) -> str:
    """The id a request is logged under and answered with (`x-request-id`): the client's own
    `X-Request-Id` if it is a plain token (≤ 128 characters, no spaces or quotes: it goes into
    log lines and headers verbatim), else the trace id of a W3C `traceparent`, else a new one."""
    given = headers.get("x-request-id", "").strip()
    if _REQUEST_ID.fullmatch(given):
        return given
    trace = _TRACEPARENT.fullmatch(headers.get("traceparent", "").strip().lower())
    if trace and trace.group(1) != "0" * 32:
        return trace.group(1)
    return "req_" + uuid.uuid4().hex[:24]
