"""What tracing costs a request: the in-process app, tracing off vs on, side by side.

`python -m bench tracing-overhead [--requests 1000] [--out bench/results/tracing-overhead.md]`

Two apps in one event loop on one embedded store, identical but for `tracing.enabled`;
requests alternate between them (bench/ab.py), each a
stateless client's 20-message history plus a new question, with a conversation id and memory
on (test embedder), `X-Gateway-Persist: false` so the store stays the same throughout. With
tracing on, spans go through the real BatchSpanProcessor to an exporter that drops them: what
the request path pays (making six spans, queueing them), not the export thread's work.
Also timed alone: `Tracing.request` on a finished request log.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any, Sequence

from bench.ab import Times, alternate, embedded_stores, history, report, running
from bench.overhead.processes import stop_children_on_sigterm
from gateway.http.app import create_app
from gateway.config import hash_key, parse_config
from gateway.ops.observability import RequestLog
from gateway.ops.tracing import start_tracing


def _config(store: str, tracing: bool) -> Any:
    return parse_config({
        "store": store, "recorder": {"mode": "external"},
        "memory": {"embedder": {"kind": "hash"}},
        "tracing": {"enabled": tracing},
        "tenants": {"acme": {"api_keys": [{"sha256": hash_key("k")}],
                             "models": {"echo": {"model": "fake/echo"}}}}})


def _dropping_exporter() -> Any:
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class Dropping(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    return Dropping()


async def _run(store: str, requests: int, warmup: int) -> Times:
    apps = {"off": create_app(_config(store, False)),
            "on": create_app(_config(store, True), span_exporter=_dropping_exporter())}
    earlier = history(20)

    def request(i: int) -> tuple[dict[str, Any], dict[str, str]]:
        return ({"model": "echo", "messages": [
                    *earlier, {"role": "user", "content": f"And now question {i}?"}]},
                {"Authorization": "Bearer k", "X-Conversation-Id": "bench", "X-User-Id": "u",
                 "X-Gateway-Persist": "false",
                 "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})

    async with running(apps) as clients:
        _batch_tracing(apps["on"])
        return await alternate(clients, requests, warmup, request)


def _batch_tracing(app: Any) -> None:
    """The "on" app's tracing, exporting from a background thread as with OTLP (create_app's
    exporter argument exports synchronously, for tests)."""
    app.state.gateway.pipeline.tracing = start_tracing(
        _config("embedded", True).tracing, _dropping_exporter(), batch=True)


def _span_cost(calls: int) -> float:
    """Microseconds per Tracing.request on a finished log with all five steps."""
    tracing = start_tracing(_config("embedded", True).tracing, _dropping_exporter(), batch=True)
    assert tracing is not None
    log = RequestLog(request_id="r", tenant="acme", user="u", conversation="c", model="echo",
                     tokens_original=900, tokens_forwarded=900, total_ms=5.0,
                     traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    now = time.perf_counter()
    for i, step in enumerate(("load", "recall", "rewrite", "upstream", "record")):
        log.steps[step] = (now + i * 0.001, now + i * 0.001 + 0.0005)
    started = time.perf_counter()
    for _ in range(calls):
        tracing.request(log)
    elapsed = (time.perf_counter() - started) / calls * 1e6
    tracing.shutdown()
    return elapsed


def main(argv: list[str]) -> int:
    stop_children_on_sigterm()
    parser = argparse.ArgumentParser(prog="python -m bench tracing-overhead")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path("bench/results/tracing-overhead.md"))
    args = parser.parse_args(argv)
    with embedded_stores("shared", prefix="gw-trace-") as stores:
        times = asyncio.run(_run(stores["shared"], args.requests, args.warmup))
    span_us = _span_cost(10_000)
    text = report(
        "Tracing overhead (in process)",
        f"python -m bench tracing-overhead --requests {args.requests}", "tracing",
        "a 20-message history, memory on, persistence off", times,
        note=f"`Tracing.request` alone (six spans from a finished log, batch processor): "
             f"{span_us:.1f} µs per request.")
    args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0
