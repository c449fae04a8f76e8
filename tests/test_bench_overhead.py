"""The overhead benchmark's harness: its arithmetic, its result shape, and a load generator
that sends exactly the requests it is asked to. No timing asserts: speed lives in bench/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.overhead.cli import parse_args
from bench.overhead.load import new_session, request_body, run_load
from bench.overhead.processes import Pinning
from bench.overhead.report import write_all
from bench.overhead.stack import Target
from bench.overhead.stats import ROW_KEYS, percentile, row
from gateway.upstream.fake_server import create_fake_app
from tests.support.servers import serve

RESULT_KEYS = ("target", "stream", "concurrency", "n", "p50_ms", "p95_ms", "p99_ms",
               "added_p50_ms", "added_p99_ms", "rps")


@pytest.mark.parametrize("values, q, expected", [
    ([1, 2, 3, 4], 50, 2.5),
    ([4, 1, 3, 2], 50, 2.5),          # order of the input does not matter
    ([1, 2, 3, 4], 0, 1),
    ([1, 2, 3, 4], 100, 4),
    ([7.0], 99, 7.0),
    (list(range(1, 101)), 99, 99.01),  # linear interpolation between closest ranks
    (list(range(1, 101)), 95, 95.05),
])
def test_percentile_interpolates_linearly_between_ranks(values: list[float], q: float,
                                                        expected: float) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)


def test_added_latency_is_target_minus_direct_at_the_same_percentile() -> None:
    direct = [1.0] * 99 + [3.0]
    target = [6.0] * 99 + [20.0]
    r = row("gateway-passthrough", stream=False, concurrency=10, latency_ms=target, wall_s=2.0,
            direct_ms=direct)
    assert r["p50_ms"] == 6.0
    assert r["added_p50_ms"] == 5.0
    assert r["added_p99_ms"] == pytest.approx(percentile(target, 99) - percentile(direct, 99),
                                              abs=0.01)
    assert r["n"] == 100 and r["rps"] == 50.0


def test_direct_adds_nothing_to_itself_and_missing_direct_leaves_added_empty() -> None:
    values = [1.0, 2.0, 3.0]
    itself = row("direct", stream=True, concurrency=1, latency_ms=values, wall_s=1.0,
                 direct_ms=values)
    assert itself["added_p50_ms"] == 0.0 and itself["added_p99_ms"] == 0.0
    alone = row("litellm-proxy", stream=True, concurrency=1, latency_ms=values, wall_s=1.0,
                direct_ms=None)
    assert alone["added_p50_ms"] is None and alone["p50_ms"] == 2.0
    empty = row("litellm-proxy", stream=True, concurrency=1, latency_ms=[], wall_s=1.0,
                direct_ms=values)
    assert empty["n"] == 0 and empty["p50_ms"] is None and empty["rps"] is None


def test_result_rows_have_exactly_the_published_keys() -> None:
    r = row("direct", stream=False, concurrency=1, latency_ms=[1.0], wall_s=1.0,
            direct_ms=[1.0])
    assert tuple(r) == RESULT_KEYS == ROW_KEYS


def test_report_writes_json_markdown_and_png_with_one_stem(tmp_path: Path) -> None:
    rows = [row(t, stream=s, concurrency=c, latency_ms=[1.0 + i, 2.0 + i], wall_s=1.0,
                direct_ms=[1.0, 2.0])
            for i, t in enumerate(("direct", "gateway-passthrough")) for s in (False, True)
            for c in (1, 10)]
    meta: dict[str, Any] = {
        "machine": {"cores": 2, "cpu_model": "test", "python": "3.11", "platform": "linux"},
        "versions": {"gateway": "0", "litellm": "0"}, "workers": 1,
        "pinning": {"used": False, "server_core": None, "load_core": None},
        "requests_per_cell": {"1": 2, "10": 2}, "rounds": 1, "warmup": 0,
        "started": "2025-01-01T00:00:00+00:00", "duration_s": 1.0, "memory": {}}
    paths = write_all(tmp_path / "o.json", meta, rows, {"persist_on": []})
    assert [p.name for p in paths] == ["o.json", "o.md", "o.png"]
    doc = json.loads(paths[0].read_text())
    assert set(doc) >= {"meta", "results"} and len(doc["results"]) == 8
    assert "| gateway-passthrough | yes | 10 | 2 |" in paths[1].read_text()
    assert paths[2].read_bytes()[:4] == b"\x89PNG"


def counting(app: Any, counter: list[int]) -> Any:
    """Wrap an ASGI app so every HTTP request it receives is counted."""
    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            counter.append(1)
        await app(scope, receive, send)
    return wrapped


async def test_load_generator_sends_exactly_the_requested_number() -> None:
    received: list[int] = []
    with serve(counting(create_fake_app(), received)) as base:
        target = Target("direct", f"{base}/v1/chat/completions")
        async with new_session(5, 10.0) as session:
            result = await run_load(session, target, request_body("hi", stream=False),
                                    requests=37, concurrency=5, deadline_s=20.0)
    assert result.errors == []
    assert result.n == 37 == len(received)
    assert result.wall_s > 0 and result.rps > 0


async def test_streaming_time_to_first_byte_is_within_the_total() -> None:
    with serve(create_fake_app()) as base:
        target = Target("direct", f"{base}/v1/chat/completions")
        body = {**request_body("stream me some words please", stream=True), "model": "slow-20"}
        async with new_session(2, 10.0) as session:
            result = await run_load(session, target, body, requests=6, concurrency=2,
                                    deadline_s=20.0)
    assert result.errors == [] and result.n == 6
    assert all(0 < first <= total for first, total in zip(result.latency_ms, result.total_ms))


async def test_failed_requests_are_errors_not_latencies() -> None:
    with serve(create_fake_app()) as base:
        target = Target("direct", f"{base}/v1/chat/completions")
        body = {**request_body("hi", stream=False), "model": "error-500"}
        async with new_session(2, 10.0) as session:
            result = await run_load(session, target, body, requests=4, concurrency=2,
                                    deadline_s=20.0)
    assert result.n == 0 and len(result.errors) == 4
    assert all(e.startswith("HTTP 500") for e in result.errors)


def test_direct_is_always_measured_and_levels_parse() -> None:
    args = parse_args(["--targets", "litellm-proxy,gateway-passthrough",
                       "--concurrency", "1,5", "--out", "x.json"])
    assert args.targets == ("direct", "gateway-passthrough", "litellm-proxy")
    assert args.concurrency == (1, 5)
    with pytest.raises(SystemExit):
        parse_args(["--targets", "nginx"])


def test_pinning_prefix_is_empty_without_a_core() -> None:
    assert Pinning(None, None).prefix(None) == []
    assert Pinning(1, 0).prefix(1) == ["taskset", "-c", "1"]
    assert not Pinning.detect(enabled=False).used
