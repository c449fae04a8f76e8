"""The measurement schedule: for each (stream, concurrency) cell, every target in turn, in
rounds, so drifts and noise hit all targets alike; added latency is computed within a cell.

gateway-memory is measured as a *stateful* client (the request carries only the new user
message) on a conversation of `history_turns` stored turns, with `X-Gateway-Persist: false` so
it stays at that size. A small separate run with persistence on (each request also records its
turn, so the conversation grows) is reported apart, as `persist_on`.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from bench.overhead.load import LoadResult, new_session, request_body, run_load
from bench.overhead.stack import Stack, Target
from bench.overhead.stats import Row, percentile, row

# ~100 tokens per stored message: 50 turns (user + echoed reply) are ~10k tokens, more than
# the bench tenant's budget of 8000 - 1000, so the rewrite drops and restores turns for real.
HISTORY_TEXT = ("Turn {i}: notes on the quarterly plan — the team reviewed budgets, hiring, the "
                "migration of the billing service, open incidents and the roadmap for search; "
                "decisions were recorded with owners and dates, and follow-ups were assigned "
                "for the security review, the customer interviews and the load tests of the "
                "new storage layer before the next release window closes.")
QUESTION = "What did we decide about the billing migration, and who owns the follow-up?"


@dataclass(frozen=True)
class Plan:
    targets: tuple[str, ...]
    concurrency: tuple[int, ...]
    streams: tuple[bool, ...] = (False, True)
    requests: int = 300
    """Measured requests per target and cell (at least 6 x concurrency), split over rounds."""
    rounds: int = 3
    warmup: int = 20
    """Unmeasured requests before each measurement (at least one per concurrent slot)."""
    history_turns: int = 50
    persist_requests: int = 100
    """Requests of the persistence-on run (concurrency 1, non-streaming); 0 skips it."""
    request_timeout_s: float = 60.0
    cell_deadline_s: float = 180.0

    def requests_at(self, concurrency: int) -> int:
        return max(self.requests, 6 * concurrency)

    def per_round(self, concurrency: int) -> int:
        return math.ceil(self.requests_at(concurrency) / self.rounds)


@dataclass
class Outcome:
    results: list[Row] = field(default_factory=list)
    persist_on: list[Row] = field(default_factory=list)
    errors: dict[str, list[str]] = field(default_factory=dict)
    server_overhead_p50_ms: dict[str, float] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)


Progress = Callable[[str], None]


async def measure(stack: Stack, plan: Plan, progress: Progress) -> Outcome:
    outcome = Outcome()
    conversation = ""
    if "gateway-memory" in plan.targets:
        conversation, outcome.memory = await build_conversation(stack, plan.history_turns)
        progress(f"memory conversation: {plan.history_turns} turns, "
                 f"{outcome.memory['tokens_original']} tokens stored, "
                 f"{outcome.memory['tokens_forwarded']} forwarded")
    targets = {name: stack.target(name, conversation=conversation or None)
               for name in plan.targets}
    for stream in plan.streams:
        for concurrency in plan.concurrency:
            cell = await _cell(targets, plan, stream, concurrency, progress)
            outcome.results += _rows(cell, stream, concurrency, outcome)
    if plan.persist_requests and "gateway-memory" in plan.targets:
        persist_conversation, _ = await build_conversation(stack, plan.history_turns)
        persist_targets = {"direct": stack.target("direct"),
                           "gateway-memory-persist": stack.target(
                               "gateway-memory", conversation=persist_conversation,
                               persist=True)}
        persist_plan = Plan(targets=tuple(persist_targets), concurrency=(1,),
                            requests=plan.persist_requests, rounds=2, warmup=0,
                            history_turns=plan.history_turns, persist_requests=0,
                            request_timeout_s=plan.request_timeout_s,
                            cell_deadline_s=plan.cell_deadline_s)
        cell = await _cell(persist_targets, persist_plan, False, 1, progress)
        outcome.persist_on = [r for r in _rows(cell, False, 1, outcome)
                              if r["target"] != "direct"]
        outcome.memory["persist_on_final_tokens_original"] = await _tokens(
            stack.target("gateway-memory", conversation=persist_conversation))
    return outcome


async def _cell(targets: dict[str, Target], plan: Plan, stream: bool, concurrency: int,
                progress: Progress) -> dict[str, LoadResult]:
    """All rounds of one cell; each round runs every target once, in a rotated order."""
    body = request_body(QUESTION, stream=stream)
    names = list(targets)
    pooled = {name: LoadResult() for name in names}
    for round_ in range(plan.rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            async with new_session(concurrency, plan.request_timeout_s) as session:
                warm = max(plan.warmup, concurrency) if plan.warmup else 0
                if warm:
                    await run_load(session, targets[name], body, requests=warm,
                                   concurrency=concurrency, deadline_s=plan.cell_deadline_s)
                result = await run_load(session, targets[name], body,
                                        requests=plan.per_round(concurrency),
                                        concurrency=concurrency,
                                        deadline_s=plan.cell_deadline_s)
            pooled[name].extend(result)
            progress(f"{'stream' if stream else 'json  '} c={concurrency:<3} round {round_ + 1}/"
                     f"{plan.rounds} {name:<22} n={result.n:<4} "
                     f"p50={_p(result.latency_ms, 50):8.2f} ms  rps={result.rps:7.1f}"
                     + (f"  errors={len(result.errors)}" if result.errors else ""))
    return pooled


def _rows(cell: dict[str, LoadResult], stream: bool, concurrency: int,
          outcome: Outcome) -> list[Row]:
    direct = cell.get("direct")
    rows = []
    for name, result in cell.items():
        key = f"{name}/{'stream' if stream else 'json'}/c{concurrency}"
        if result.errors:
            outcome.errors[key] = result.errors[:5] + (
                [f"... {len(result.errors) - 5} more"] if len(result.errors) > 5 else [])
        if result.server_overhead_ms:
            outcome.server_overhead_p50_ms[key] = round(
                percentile(result.server_overhead_ms, 50), 3)
        rows.append(row(name, stream=stream, concurrency=concurrency,
                        latency_ms=result.latency_ms, wall_s=result.wall_s,
                        direct_ms=direct.latency_ms if direct else None))
    return rows


async def build_conversation(stack: Stack, turns: int) -> tuple[str, dict[str, Any]]:
    """Store a fresh conversation of `turns` turns through the gateway (stateful client, one new
    user message per request), then read back its size from the response headers."""
    conversation = "bench-" + secrets.token_hex(6)
    target = stack.target("gateway-memory", conversation=conversation, persist=True)
    async with new_session(1, 60.0) as session:
        for i in range(turns):
            body = request_body(HISTORY_TEXT.format(i=i + 1), stream=False)
            async with session.post(target.url, json=body, headers=target.headers) as response:
                if response.status != 200:
                    raise RuntimeError(f"building the conversation failed at turn {i + 1}: "
                                       f"HTTP {response.status} {await response.text()}")
                await response.read()
    await asyncio.sleep(1.0)  # let the recorder apply the last turns before measuring
    probe = stack.target("gateway-memory", conversation=conversation)
    async with new_session(1, 60.0) as session:
        async with session.post(probe.url, json=request_body(QUESTION, stream=False),
                                headers=probe.headers) as response:
            await response.read()
            info = {"conversation_mode": "stateful (new user message only)",
                    "persist": False, "history_turns": turns,
                    "tokens_original": int(response.headers.get("x-gateway-tokens-original", -1)),
                    "tokens_forwarded": int(response.headers.get("x-gateway-tokens-forwarded",
                                                                 -1))}
    return conversation, info


async def _tokens(target: Target) -> int:
    probe = Target(target.name, target.url, {**target.headers, "X-Gateway-Persist": "false"})
    async with new_session(1, 60.0) as session:
        async with session.post(probe.url, json=request_body(QUESTION, stream=False),
                                headers=probe.headers) as response:
            await response.read()
            return int(response.headers.get("x-gateway-tokens-original", -1))


def _p(values: list[float], q: float) -> float:
    return percentile(values, q) if values else float("nan")


def elapsed(started: float) -> float:
    return round(time.monotonic() - started, 1)
