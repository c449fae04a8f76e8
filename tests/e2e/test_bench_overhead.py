"""The overhead benchmark's harness: its arithmetic, its result shape, the targets it checks,
which baseline each row subtracts, and a load generator that sends exactly the requests it is
asked to. No timing asserts: speed lives in bench/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench.overhead.cli import parse_args
from bench.overhead.conversation import VARIANTS, Conversation, question, seed_messages
from bench.overhead.goals import Goal, check, goals, ratio_goals
from bench.overhead.load import Bodies, new_session, request_body, run_load, \
    run_stateless_client, stream_ended
from bench.overhead.processes import Pinning, cpu_seconds, descendants, describe_process
from bench.overhead.report import markdown, write_all
from bench.overhead.run import Plan, cell_entries
from bench.overhead.stack import SOURCE_ROOT, Stack, Target, child_env
from bench.overhead.stats import ROW_KEYS, CellKey, Row, percentile, row
from gateway.upstream.fake_server import create_fake_app
from tests.support.servers import serve

RESULT_KEYS = ("target", "stream", "concurrency", "turns", "persist", "body", "baseline",
               "tokens_in", "body_bytes", "n", "errors", "p50_ms", "p95_ms", "p99_ms",
               "baseline_p50_ms", "baseline_p99_ms", "added_p50_ms", "added_p99_ms", "rps",
               "reported_overhead_p50_ms")
CELL = CellKey(stream=False, concurrency=1, turns=50)


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


def test_added_latency_is_target_minus_its_baseline_at_the_same_percentile() -> None:
    direct = [1.0] * 99 + [3.0]
    target = [6.0] * 99 + [20.0]
    r = row("gateway-memory", CellKey(False, 10, 50), body="full", baseline="forwarded",
            latency_ms=target, wall_s=2.0, baseline_ms=direct, tokens_in=7000, body_bytes=40000)
    assert r["p50_ms"] == 6.0 and r["baseline_p50_ms"] == 1.0
    assert r["added_p50_ms"] == 5.0
    assert r["added_p99_ms"] == pytest.approx(percentile(target, 99) - percentile(direct, 99),
                                              abs=0.01)
    assert r["n"] == 100 and r["rps"] == 50.0
    assert (r["body"], r["baseline"], r["tokens_in"]) == ("full", "forwarded", 7000)


def test_direct_adds_nothing_to_itself_and_missing_baseline_leaves_added_empty() -> None:
    values = [1.0, 2.0, 3.0]
    itself = row("direct", CELL, body="full", baseline="full", latency_ms=values, wall_s=1.0,
                 baseline_ms=values)
    assert itself["added_p50_ms"] == 0.0 and itself["added_p99_ms"] == 0.0
    alone = row("litellm-proxy", CELL, body="full", baseline="full", latency_ms=values,
                wall_s=1.0, baseline_ms=None)
    assert alone["added_p50_ms"] is None and alone["p50_ms"] == 2.0
    empty = row("litellm-proxy", CELL, body="full", baseline="full", latency_ms=[], wall_s=1.0,
                baseline_ms=values, errors=3)
    assert empty["n"] == 0 and empty["p50_ms"] is None and empty["rps"] is None
    assert empty["errors"] == 3


def test_result_rows_have_exactly_the_published_keys() -> None:
    r = row("direct", CELL, body="full", baseline="full", latency_ms=[1.0], wall_s=1.0,
            baseline_ms=[1.0])
    assert tuple(r) == RESULT_KEYS == ROW_KEYS
    assert {"target", "stream", "concurrency", "turns", "persist", "added_p50_ms",
            "added_p99_ms", "rps"} <= set(r)  # issue 10's minimum


def test_a_cell_without_history_has_no_turns_and_persist_is_the_cells() -> None:
    r = row("gateway-memory", CellKey(True, 1, 0, persist=True), body="full",
            baseline="forwarded", latency_ms=[1.0], wall_s=1.0, baseline_ms=[0.5])
    assert r["turns"] is None and r["persist"] is True and r["stream"] is True
    assert CellKey(True, 10, 300, persist=True).label() == "stream/c10/t300/persist"


def fake_row(target: str, *, turns: int | None = 50, concurrency: int = 1, stream: bool = False,
             persist: bool = False, p50: float = 1.0, p99: float = 2.0,
             rps: float = 100.0, n: int = 10) -> Row:
    r = row(target, CellKey(stream, concurrency, turns or 0, persist), body="full",
            baseline="full", latency_ms=[1.0] * n, wall_s=1.0, baseline_ms=[1.0])
    r.update(added_p50_ms=p50, added_p99_ms=p99, rps=rps)
    return r


def test_targets_are_met_or_not_by_their_own_rows_only() -> None:
    rows = [
        fake_row("gateway-memory", p50=7.9, p99=25.0),
        fake_row("gateway-memory", turns=300, p50=10.5),
        fake_row("gateway-memory", persist=True, p50=12.0),
        fake_row("gateway-passthrough", p50=1.5),
        fake_row("gateway-memory", concurrency=10, rps=300.0),
        fake_row("litellm-proxy", concurrency=10, rps=100.0),
        fake_row("gateway-memory", stream=True, p50=30.0),
    ]
    by_goal = {c["goal"]: c for c in check(goals((50, 300)), rows)}
    assert by_goal["gateway-memory, 50 turns, c=1: added p50"]["met"] is True
    assert by_goal["gateway-memory, 50 turns, c=1: added p99"]["met"] is False
    assert by_goal["gateway-memory, 300 turns, c=1: added p50"]["measured"] == 10.5
    assert by_goal["gateway-memory, 300 turns, c=1: added p50"]["met"] is False
    assert by_goal["gateway-memory, persistence on, 50 turns, c=1: added p50"]["met"] is True
    persist_300 = by_goal["gateway-memory, persistence on, 300 turns, c=1: added p50"]
    assert persist_300["measured"] is None and persist_300["met"] is None
    ratio = by_goal["gateway-memory, 50 turns, c=10: req/s vs litellm-proxy (same body)"]
    assert ratio["measured"] == 3.0 and ratio["met"] is True and ratio["limit"].startswith("≥")
    assert by_goal["gateway-passthrough (no conversation id), 50-turn body, c=1: added p50"][
        "met"] is True
    assert by_goal["gateway-memory streaming, 50 turns, c=1: added time to first byte p50"][
        "met"] is False


def test_issue_36_targets_are_ratios_of_rows_of_the_same_run() -> None:
    rows = [
        fake_row("gateway-memory", p50=5.0),
        fake_row("gateway-memory", turns=300, p50=7.0),
        fake_row("gateway-memory", persist=True, p50=6.0),
        fake_row("litellm-proxy", p50=20.0),
        fake_row("gateway-memory-anthropic", p50=5.5),
        fake_row("gateway-memory-responses", p50=6.0),
        fake_row("gateway-memory", concurrency=10, rps=300.0),
        fake_row("litellm-proxy", concurrency=10, rps=100.0),
    ]
    by_goal = {c["goal"]: c for c in check(ratio_goals((50, 300)), rows)}
    assert {c["issue"] for c in by_goal.values()} == {36}
    litellm = by_goal["gateway-memory, 50 turns, c=1: added p50 vs litellm-proxy's"]
    assert (litellm["measured"], litellm["met"]) == (0.25, False)
    flat = by_goal["gateway-memory, 300 turns, c=1: added p50 vs its own at 50 turns"]
    assert (flat["measured"], flat["met"]) == (1.4, False)
    persist = by_goal["gateway-memory, persistence on, 50 turns, c=1: added p50 vs persistence off"]
    assert (persist["measured"], persist["met"]) == (1.2, True)
    assert by_goal["gateway-memory-anthropic, 50 turns, c=1: added p50 vs the chat door"][
        "met"] is True
    assert by_goal["gateway-memory-responses, 50 turns, c=1: added p50 vs the chat door"][
        "measured"] == 1.2
    assert by_goal["gateway-memory, 50 turns, c=10: req/s vs litellm-proxy (same body)"][
        "met"] is True
    assert by_goal["gateway-memory, 300 turns, c=1: added p50 vs litellm-proxy's"][
        "measured"] is None  # no litellm-proxy row at 300 turns


def test_a_target_whose_row_had_no_successful_request_is_not_measured() -> None:
    goal = Goal("x", "gateway-memory", "added_p50_ms", 8)
    [result] = check([goal], [fake_row("gateway-memory", n=0)])
    assert result["measured"] is None and result["met"] is None


def meta_for_report() -> dict[str, Any]:
    return {
        "machine": {"cores": 2, "cpu_model": "test", "python": "3.11", "platform": "linux"},
        "versions": {"gateway": "0", "litellm": "0", "litellm_proxy": "0"},
        "source": {"path": "/x", "commit": "abc", "branch": "b", "uncommitted_changes": False},
        "workers": 1,
        "pinning": {"used": True, "server_core": 1, "load_core": 0, "store_core": 0,
                    "store": "load"},
        "placement": [{"role": "gateway", "pid": 7, "command": "python -m gateway serve",
                       "cpus": [1]}],
        "conversations": {"50": {"turns": 50, "stored_messages": 100, "conversation_id": "c",
                                 "user": "u", "prepare_s": 1.0,
                                 "full_body": {"tokens": 6900, "bytes": 40000, "messages": 101},
                                 "forwarded_body": {"tokens": 6000, "bytes": 35000,
                                                    "messages": 80}}},
        "persist": {"50": {"start_turns": 50, "requests": 10, "end_turns_expected": 60,
                           "end_messages_stored": 120, "recorded_every_turn": True,
                           "caught_up_s": 1.2,
                           "cpu_ms_per_turn": {"server": 9.5, "worker": 17.25, "store": 1.0}}},
        "method": ["how it was measured"], "requests_per_cell": {"1": 2, "10": 2},
        "rounds": 1, "warmup": 0, "started": "2025-01-01T00:00:00+00:00", "duration_s": 1.0}


def test_report_writes_json_markdown_and_png_with_one_stem(tmp_path: Path) -> None:
    rows = [row(t, CellKey(s, c, turns, persist=p), body="full", baseline="full",
                latency_ms=[1.0 + i, 2.0 + i], wall_s=1.0, baseline_ms=[1.0, 2.0])
            for i, t in enumerate(("direct", "gateway-memory")) for s in (False, True)
            for c in (1, 10) for turns in (50, 300) for p in (False, True)
            if not (p and (s or c != 1))]
    targets = check(goals((50, 300)), rows)
    paths = write_all(tmp_path / "o.json", meta_for_report(), rows, targets)
    assert [p.name for p in paths] == ["o.json", "o.md", "o.png"]
    doc = json.loads(paths[0].read_text())
    assert set(doc) == {"meta", "targets", "results"} and len(doc["results"]) == len(rows)
    md = paths[1].read_text()
    assert "| gateway-memory | full | yes | 10 | 300 | 2 |" in md
    assert "## Targets (issue 10)" in md and "| gateway-memory, 50 turns, c=1: added p50" in md
    assert "6,900 tokens" in md and "6,000 tokens" in md  # both bodies' sizes
    assert "embedded store (Valkey) on the load core" in md
    assert "## With persistence on" in md and "every turn recorded" in md
    assert "server 9.5 ms, memory worker 17.25 ms, store 1.0 ms" in md
    assert "was done 1.2 s after the last persisted request" in md
    assert paths[2].read_bytes()[:4] == b"\x89PNG"


def test_report_says_when_the_store_shares_the_servers_core() -> None:
    meta = meta_for_report()
    meta["pinning"]["store_core"] = 1
    assert "it shares the gateway's core" in markdown(meta, [], [])


def counting(app: Any, received: list[bytes]) -> Any:
    """Wrap an ASGI app so the body of every HTTP request it receives is kept."""
    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        chunks: list[bytes] = []

        async def keep() -> dict[str, Any]:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                received.append(b"".join(chunks))
            return message
        await app(scope, keep, send)
    return wrapped


async def test_load_generator_sends_exactly_the_requested_number_cycling_the_bodies() -> None:
    received: list[bytes] = []
    bodies = Bodies.of([request_body(f"variant {k}", stream=False) for k in range(3)])
    with serve(counting(create_fake_app(), received)) as base:
        target = Target("direct", f"{base}/v1/chat/completions")
        async with new_session(5, 10.0) as session:
            result = await run_load(session, target, bodies, requests=37, concurrency=5,
                                    deadline_s=20.0)
    assert result.errors == []
    assert result.n == 37 == len(received)
    assert result.wall_s > 0 and result.rps > 0
    asked = [json.loads(b)["messages"][0]["content"] for b in received]
    assert {asked.count(f"variant {k}") for k in range(3)} == {12, 13}  # 13 + 12 + 12


def test_bodies_of_one_run_all_stream_or_all_do_not() -> None:
    with pytest.raises(ValueError):
        Bodies.of([request_body("a", stream=True), request_body("b", stream=False)])
    with pytest.raises(ValueError):
        Bodies.of([])
    assert Bodies.of([request_body("a", stream=True)]).stream


async def test_streaming_time_to_first_byte_is_within_the_total() -> None:
    with serve(create_fake_app()) as base:
        target = Target("direct", f"{base}/v1/chat/completions")
        body = request_body("stream me some words please", stream=True, model="slow-20")
        async with new_session(2, 10.0) as session:
            result = await run_load(session, target, Bodies.of([body]), requests=6,
                                    concurrency=2, deadline_s=20.0)
    assert result.errors == [] and result.n == 6
    assert all(0 < first <= total for first, total in zip(result.latency_ms, result.total_ms))


async def test_failed_requests_are_errors_not_latencies() -> None:
    with serve(create_fake_app()) as base:
        target = Target("direct", f"{base}/v1/chat/completions")
        body = request_body("hi", stream=False, model="error-500")
        async with new_session(2, 10.0) as session:
            result = await run_load(session, target, Bodies.of([body]), requests=4,
                                    concurrency=2, deadline_s=20.0)
    assert result.n == 0 and len(result.errors) == 4
    assert all(e.startswith("HTTP 500") for e in result.errors)


async def test_stateless_client_resends_its_growing_history_with_each_question() -> None:
    received: list[bytes] = []
    history = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "one"}]
    with serve(counting(create_fake_app(), received)) as base:
        target = Target("direct", f"{base}/v1/chat/completions")
        async with new_session(1, 10.0) as session:
            result = await run_stateless_client(session, target, history, ["q1", "q2", "q3"],
                                                deadline_s=20.0)
    assert result.errors == [] and result.n == 3
    sent = [json.loads(b)["messages"] for b in received]
    assert [len(m) for m in sent] == [3, 5, 7]
    assert sent[2][:5] == [*history[:2], {"role": "user", "content": "q1"},
                           {"role": "assistant", "content": "q1"},  # the fake echoes
                           {"role": "user", "content": "q2"}]
    assert len(history) == 8  # the caller's client goes on from here


def conversation(turns: int = 2) -> Conversation:
    history = tuple(seed_messages(turns)) + ({"role": "assistant", "content": "reply"},)
    forwarded = tuple((history[-1], question(k)) for k in range(VARIANTS))
    return Conversation(turns, "conv", "user", history, forwarded, tokens_full=500,
                        tokens_forwarded=100, prepare_s=0.1)


def test_each_target_is_measured_against_the_body_its_upstream_receives(tmp_path: Path) -> None:
    stack = Stack(tmp_path, Pinning(None, None), workers=1, litellm="litellm",
                  fake_url="http://f", gateway_url="http://g", litellm_url="http://l")
    plan = Plan(targets=("direct", "gateway-passthrough", "gateway-memory", "litellm-proxy",
                         "litellm-proxy-forwarded"), concurrency=(1,))
    conv = conversation()
    entries = cell_entries(stack, plan, conv, stream=True)
    seen = {e.label: (e.body, e.baseline, e.tokens_in) for e in entries}
    assert seen == {
        "direct (full)": ("full", "full", 500),
        "direct (forwarded)": ("forwarded", "forwarded", 100),
        "gateway-passthrough": ("full", "full", 500),
        "gateway-memory": ("full", "forwarded", 500),
        "litellm-proxy": ("full", "full", 500),
        "litellm-proxy-forwarded": ("forwarded", "forwarded", 100),
    }
    memory = next(e for e in entries if e.label == "gateway-memory")
    assert memory.target.headers["X-Gateway-Persist"] == "false"
    assert memory.target.headers["X-Conversation-Id"] == "conv"
    assert all(e.bodies.stream for e in entries)
    sent = json.loads(memory.bodies[1])["messages"]
    assert sent[:-1] == list(conv.history) and sent[-1] == question(1)


def test_each_door_gets_the_same_conversation_in_its_own_wire_form(tmp_path: Path) -> None:
    stack = Stack(tmp_path, Pinning(None, None), workers=1, litellm="litellm",
                  fake_url="http://f", gateway_url="http://g", litellm_url="http://l")
    plan = Plan(targets=("direct", "gateway-memory", "gateway-memory-anthropic",
                         "gateway-memory-responses"), concurrency=(1,))
    conv = conversation()
    entries = {e.label: e for e in cell_entries(stack, plan, conv, stream=True)}
    anthropic, responses = entries["gateway-memory-anthropic"], entries["gateway-memory-responses"]
    assert anthropic.target.url == "http://g/v1/messages"
    assert responses.target.url == "http://g/v1/responses"
    for entry in (anthropic, responses):
        assert (entry.body, entry.baseline) == ("full", "forwarded")
        assert entry.target.headers["X-Conversation-Id"] == "conv"
        assert entry.target.headers["X-Gateway-Persist"] == "false"
    chat = json.loads(entries["gateway-memory"].bodies[1])
    sent = json.loads(anthropic.bodies[1])
    assert sent["messages"] == chat["messages"] and sent["max_tokens"] > 0 and sent["stream"]
    assert json.loads(responses.bodies[1])["input"] == chat["messages"]


@pytest.mark.parametrize("dialect, payload, ended", [
    ("chat", b'data: {"x":1}\n\ndata: [DONE]\n\n', True),
    ("chat", b'data: {"x":1}\n\n', False),
    ("anthropic", b'event: message_stop\ndata: {"type":"message_stop"}\n\n', True),
    ("anthropic", b'event: ping\ndata: {"type":"ping"}\n\n', False),
    ("responses", b'event: response.completed\ndata: {"type":"response.completed",'
                  b'"sequence_number":9,"response":{}}\n\n', True),
    ("responses", b'event: error\ndata: {"type":"error","message":"x"}\n\n', False),
])
def test_a_stream_ends_as_its_dialect_ends_it(dialect: str, payload: bytes, ended: bool) -> None:
    assert stream_ended(payload, dialect) is ended


def test_without_a_forwarding_target_only_the_full_body_is_measured(tmp_path: Path) -> None:
    stack = Stack(tmp_path, Pinning(None, None), workers=1, litellm="litellm",
                  fake_url="http://f", gateway_url="http://g", litellm_url="http://l")
    plan = Plan(targets=("direct", "litellm-proxy"), concurrency=(1,))
    assert [e.label for e in cell_entries(stack, plan, conversation(), stream=False)] == [
        "direct (full)", "litellm-proxy"]


def test_seed_is_n_minus_one_turns_and_the_nth_question() -> None:
    seed = seed_messages(3)
    assert [m["role"] for m in seed] == ["user", "assistant", "user", "assistant", "user"]
    assert seed[-1]["content"].startswith("Turn 3:")
    assert seed_messages(0) == []


def test_arguments_parse_and_direct_is_always_measured() -> None:
    args = parse_args(["--targets", "litellm-proxy-forwarded,gateway-passthrough",
                       "--concurrency", "1,5", "--turns", "0,50", "--out", "x.json"])
    assert args.targets == ("direct", "gateway-passthrough", "litellm-proxy-forwarded")
    assert args.concurrency == (1, 5) and args.turns == (0, 50)
    assert parse_args(["--history-turns", "80"]).turns == (80,)  # the old flag still works
    assert parse_args([]).turns == (50, 300)
    for bad in (["--targets", "nginx"], ["--turns", "-1"], ["--store-core", "disk"]):
        with pytest.raises(SystemExit):
            parse_args(bad)


def test_pinning_places_the_store_where_asked() -> None:
    assert Pinning(None, None).prefix(None) == []
    assert Pinning(1, 0).prefix(1) == ["taskset", "-c", "1"]
    assert not Pinning.detect(enabled=False).used
    with pytest.raises(ValueError):
        Pinning.detect(store="disk")
    pinning = Pinning.detect(store="server")
    if pinning.used:
        assert pinning.store_core == pinning.server_core != pinning.load_core
        assert Pinning.detect(store="load").store_core == pinning.load_core


def test_children_import_the_gateway_of_this_checkout() -> None:
    env = {**os.environ, **child_env()}
    out = subprocess.run([sys.executable, "-c", "import gateway; print(gateway.__file__)"],
                         env=env, cwd="/", capture_output=True, text=True, check=True).stdout
    assert Path(out.strip()).resolve() == SOURCE_ROOT / "gateway" / "__init__.py"


def test_placement_finds_a_childs_children_and_their_cores() -> None:
    parent = subprocess.Popen([sys.executable, "-c",
                               "import subprocess, sys; subprocess.run([sys.executable, '-c', "
                               "'import time; time.sleep(30)'])"])
    try:
        for _ in range(100):
            found = descendants(parent.pid)
            if found:
                break
            time.sleep(0.05)
        assert len(found) == 1
        described = describe_process(found[0], "child")
        assert described["cpus"] and "time.sleep" in str(described["command"])
    finally:
        for pid in descendants(parent.pid):
            os.kill(pid, 9)
        parent.kill()
        parent.wait()


def test_cpu_seconds_count_a_process_s_work_and_nothing_once_it_is_gone() -> None:
    busy = subprocess.Popen([sys.executable, "-c",
                             "import time\nend = time.process_time() + 0.3\n"
                             "while time.process_time() < end: pass\ntime.sleep(30)"])
    try:
        for _ in range(200):
            used = cpu_seconds(busy.pid)
            if used >= 0.3:
                break
            time.sleep(0.05)
        assert 0.3 <= used < 5
    finally:
        busy.kill()
        busy.wait()
    assert cpu_seconds(busy.pid) == 0.0


@pytest.mark.parametrize("requests, rounds, concurrency, expected", [
    (300, 3, 1, (3, 100)),
    (300, 3, 10, (3, 100)),
    (300, 3, 100, (1, 300)),   # three waves in one round, not three bursts of one wave
    (30, 1, 10, (1, 30)),
    (30, 3, 100, (1, 300)),    # at least three requests per concurrent slot
])
def test_a_round_is_never_a_single_burst_of_one_request_per_slot(
        requests: int, rounds: int, concurrency: int, expected: tuple[int, int]) -> None:
    plan = Plan(targets=("direct",), concurrency=(concurrency,), requests=requests,
                rounds=rounds)
    assert (plan.rounds_at(concurrency), plan.per_round(concurrency)) == expected
    assert plan.per_round(concurrency) >= 2 * concurrency or plan.rounds_at(concurrency) == 1


async def test_the_worker_counts_as_idle_only_once_its_group_has_read_and_acked_every_record(
        redis_client):
    # The worker process starts after the server is ready: a stream it has not read yet (no
    # consumer group) is work to come, not idleness — measuring then would time the gateway
    # while its worker indexes the conversation just stored.
    from bench.overhead.conversation import _idle
    from gateway.store.keys import KeySpace

    keys = KeySpace()
    await redis_client.delete(keys.records, keys.memory_dirty)
    assert await _idle(redis_client, keys)  # nothing recorded yet
    await redis_client.xadd(keys.records, {"turn": "1"})
    assert not await _idle(redis_client, keys)  # no consumer group yet
    await redis_client.xgroup_create(keys.records, "recorders", id="0")
    assert not await _idle(redis_client, keys)  # not delivered
    delivered = await redis_client.xreadgroup("recorders", "c1", {keys.records: ">"}, count=1)
    assert not await _idle(redis_client, keys)  # delivered, pending
    await redis_client.xack(keys.records, "recorders", delivered[0][1][0][0])
    assert await _idle(redis_client, keys)
    await redis_client.zadd(keys.memory_dirty, {"conversation": 1.0})
    assert not await _idle(redis_client, keys)  # the memory worker has a conversation to do
    await redis_client.delete(keys.records, keys.memory_dirty)
