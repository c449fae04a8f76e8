"""The measurement schedule.

Cells are (stream, concurrency, turns). In each cell every entry — a target with the body it
is sent — runs in turn, in rounds with a rotated order, so drifts and noise hit all alike:

| entry                    | client sends     | its upstream receives |
|--------------------------|------------------|-----------------------|
| direct (full)            | full             | full                  |
| direct (forwarded)       | forwarded        | forwarded             |
| gateway-passthrough      | full, no conv id | full                  |
| gateway-memory           | full + conv id   | forwarded             |
| gateway-memory-anthropic | the same as a Messages body  | forwarded |
| gateway-memory-responses | the same as a Responses body | forwarded |
| litellm-proxy            | full             | full                  |
| litellm-proxy-forwarded  | forwarded        | forwarded             |

`added` = target pXX - direct pXX where direct got the body *this target's upstream receives*:
what the server in the middle adds. Subtracting direct-with-the-full-body from gateway-memory
would credit the gateway with upstream work it avoided by forwarding less (the fake counts the
prompt's tokens for `usage`: ~3 ms at 50 turns, ~10 ms at 300, measured), which is the size of
the targets. Both direct rows are in the results, so either difference can be read off.

gateway-memory sends `X-Gateway-Persist: false` there, so the conversation stays at N turns.
Persistence on is measured after all cells, per length, at c=1 non-streaming: a stateless client
continues the N-turn conversation (each request records a turn, so it grows by one per
request), interleaved with direct (forwarded); its turns are the length it started at.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from bench.overhead.conversation import Conversation, prepare, stored_messages, wait_idle
from bench.overhead.load import Bodies, LoadResult, new_session, run_load, run_stateless_client
from bench.overhead.stack import DIALECT_PATHS, Stack, Target
from bench.overhead.stats import Body, CellKey, Row, percentile, row

PERSIST_QUESTION = ("Follow-up {i}: remind me who owns the load tests of the storage layer and "
                    "what is still open before the release window?")


@dataclass(frozen=True)
class Plan:
    targets: tuple[str, ...]
    concurrency: tuple[int, ...]
    streams: tuple[bool, ...] = (False, True)
    turns: tuple[int, ...] = (50, 300)
    requests: int = 300
    """Measured requests per entry and cell (at least 3 x concurrency), split over rounds."""
    rounds: int = 3
    """Interleaved rounds per cell; fewer where a round would be under two waves of requests."""
    warmup: int = 20
    """Unmeasured requests before each measurement (at least one per concurrent slot)."""
    persist_requests: int = 100
    """Requests of each persistence-on run (c=1, non-streaming); 0 skips them."""
    request_timeout_s: float = 120.0
    cell_deadline_s: float = 300.0

    def requests_at(self, concurrency: int) -> int:
        return max(self.requests, 3 * concurrency)

    def rounds_at(self, concurrency: int) -> int:
        """Rounds of at least two requests per concurrent slot: a round of one request per slot
        is a burst whose latencies spread from 1 to c service times, not a closed loop at c.
        300 requests at c=100 are one round of three waves (the warm-up is a fourth)."""
        waves = self.requests_at(concurrency) // (2 * concurrency)
        return max(1, min(self.rounds, waves))

    def per_round(self, concurrency: int) -> int:
        return math.ceil(self.requests_at(concurrency) / self.rounds_at(concurrency))

    @property
    def forwarded(self) -> bool:
        """Whether cells need the forwarded body (and a direct row with it)."""
        return any(t in self.targets for t in DIALECT_PATHS) or \
            "litellm-proxy-forwarded" in self.targets


@dataclass(frozen=True)
class Entry:
    """One target in one cell: where it is sent, what it is sent, what its upstream gets."""

    target: Target
    bodies: Bodies
    body: Body
    baseline: Body
    tokens_in: int | None

    @property
    def label(self) -> str:
        return f"{self.target.name} ({self.body})" if self.target.name == "direct" else \
            self.target.name


@dataclass
class Outcome:
    results: list[Row] = field(default_factory=list)
    errors: dict[str, list[str]] = field(default_factory=dict)
    conversations: dict[str, Any] = field(default_factory=dict)
    persist: dict[str, Any] = field(default_factory=dict)


Progress = Callable[[str], None]


async def measure(stack: Stack, plan: Plan, progress: Progress) -> Outcome:
    outcome = Outcome()
    conversations = {}
    for turns in plan.turns:
        conv = await prepare(stack, turns)
        conversations[turns] = conv
        outcome.conversations[str(turns)] = conv.meta()
        progress(f"conversation of {turns} turns ready in {conv.prepare_s:.1f} s: body "
                 f"{conv.tokens_full} tokens, forwarded {conv.tokens_forwarded}")
    for turns, conv in conversations.items():
        for stream in plan.streams:
            for concurrency in plan.concurrency:
                cell = CellKey(stream, concurrency, turns)
                entries = cell_entries(stack, plan, conv, stream)
                pooled = await _cell(entries, plan, cell, progress)
                outcome.results += _rows(cell, entries, pooled, outcome)
    if plan.persist_requests and "gateway-memory" in plan.targets:
        for turns, conv in conversations.items():
            waited = await wait_idle(stack)
            outcome.results += await _persist_cell(stack, plan, conv, outcome, progress)
            outcome.persist[str(turns)]["idle_wait_before_s"] = round(waited, 1)
    return outcome


def cell_entries(stack: Stack, plan: Plan, conv: Conversation, stream: bool) -> list[Entry]:
    full, tokens_full = conv.full_bodies(stream), conv.tokens_full
    entries = [Entry(stack.target("direct"), full, "full", "full", tokens_full)]
    if plan.forwarded:
        entries.append(Entry(stack.target("direct"), conv.forwarded_bodies(stream), "forwarded",
                             "forwarded", conv.tokens_forwarded))
    for name in plan.targets:
        if name in DIALECT_PATHS:  # the same conversation, through each door
            target = stack.target(name, conversation=conv.conversation_id, user=conv.user)
            entries.append(Entry(target, conv.full_bodies(stream, target.dialect), "full",
                                 "forwarded", tokens_full))
        elif name == "litellm-proxy-forwarded":
            entries.append(Entry(stack.target(name), conv.forwarded_bodies(stream), "forwarded",
                                 "forwarded", conv.tokens_forwarded))
        elif name != "direct":
            entries.append(Entry(stack.target(name), full, "full", "full", tokens_full))
    return entries


async def _cell(entries: list[Entry], plan: Plan, cell: CellKey,
                progress: Progress) -> list[LoadResult]:
    """All rounds of one cell; each round runs every entry once, in a rotated order."""
    pooled = [LoadResult() for _ in entries]
    order = list(range(len(entries)))
    rounds = plan.rounds_at(cell.concurrency)
    for round_ in range(rounds):
        shift = round_ % len(order)
        for i in order[shift:] + order[:shift]:
            entry = entries[i]
            async with new_session(cell.concurrency, plan.request_timeout_s) as session:
                warm = max(plan.warmup, cell.concurrency) if plan.warmup else 0
                if warm:
                    await run_load(session, entry.target, entry.bodies, requests=warm,
                                   concurrency=cell.concurrency,
                                   deadline_s=plan.cell_deadline_s)
                result = await run_load(session, entry.target, entry.bodies,
                                        requests=plan.per_round(cell.concurrency),
                                        concurrency=cell.concurrency,
                                        deadline_s=plan.cell_deadline_s)
            pooled[i].extend(result)
            _report(progress, cell, round_, rounds, entry.label, result)
    return pooled


async def _persist_cell(stack: Stack, plan: Plan, conv: Conversation, outcome: Outcome,
                        progress: Progress) -> list[Row]:
    """Persistence on: a stateless client continuing the conversation, c=1, interleaved with
    direct (forwarded) in rounds."""
    cell = CellKey(False, 1, conv.turns, persist=True)
    gateway = stack.target("gateway-memory", conversation=conv.conversation_id, user=conv.user,
                           persist=True)
    direct = Entry(stack.target("direct"), conv.forwarded_bodies(False), "forwarded",
                   "forwarded", conv.tokens_forwarded)
    history = list(conv.history)
    asked = 0

    def questions(n: int) -> list[str]:
        nonlocal asked
        asked += n
        return [PERSIST_QUESTION.format(i=i) for i in range(asked - n + 1, asked + 1)]

    per_round = math.ceil(plan.persist_requests / plan.rounds)
    results = [LoadResult(), LoadResult()]
    cpu_before = stack.gateway_cpu()
    async with new_session(1, plan.request_timeout_s) as session:
        if plan.warmup:
            await run_stateless_client(session, gateway, history, questions(plan.warmup),
                                       deadline_s=plan.cell_deadline_s)
            await run_load(session, direct.target, direct.bodies, requests=plan.warmup,
                           concurrency=1, deadline_s=plan.cell_deadline_s)
        caught_up_s = 0.0
        for round_ in range(plan.rounds):
            result = await run_stateless_client(session, gateway, history,
                                                questions(per_round),
                                                deadline_s=plan.cell_deadline_s)
            results[1].extend(result)
            _report(progress, cell, round_, plan.rounds, "gateway-memory", result)
            if round_ == plan.rounds - 1:
                # How far memory work trails the requests: the worker yields the shared core
                # to the server, so under this closed loop it catches up afterwards.
                caught_up_s = await wait_idle(stack)
            result = await run_load(session, direct.target, direct.bodies, requests=per_round,
                                    concurrency=1, deadline_s=plan.cell_deadline_s)
            results[0].extend(result)
            _report(progress, cell, round_, plan.rounds, direct.label, result)
    # Its body at the start (it grows by a turn per request); sent by the client above.
    memory = Entry(gateway, conv.full_bodies(False), "full", "forwarded", conv.tokens_full)
    rows = _rows(cell, [direct, memory], results, outcome)
    await wait_idle(stack)
    # Until the worker is idle again: the CPU of every turn recorded, also what it caught up on
    # after the last request (the direct rounds between cost the gateway nothing).
    cpu_after = stack.gateway_cpu()
    stored = await stored_messages(stack, conv)
    outcome.persist[str(conv.turns)] = {
        "start_turns": conv.turns, "requests": asked, "end_turns_expected": conv.turns + asked,
        "end_messages_stored": stored,
        "recorded_every_turn": stored == 2 * (conv.turns + asked),
        "caught_up_s": round(caught_up_s, 1),
        "cpu_ms_per_turn": {part: round((cpu_after[part] - cpu_before[part]) * 1e3 / asked, 1)
                            for part in cpu_before}}
    return rows


def _rows(cell: CellKey, entries: list[Entry], results: list[LoadResult],
          outcome: Outcome) -> list[Row]:
    direct = {e.body: r.latency_ms for e, r in zip(entries, results)
              if e.target.name == "direct"}
    rows = []
    for entry, result in zip(entries, results):
        if result.errors:
            outcome.errors[f"{entry.label}/{cell.label()}"] = result.errors[:5] + (
                [f"... {len(result.errors) - 5} more"] if len(result.errors) > 5 else [])
        rows.append(row(entry.target.name, cell, body=entry.body, baseline=entry.baseline,
                        latency_ms=result.latency_ms, wall_s=result.wall_s,
                        baseline_ms=direct.get(entry.baseline), tokens_in=entry.tokens_in,
                        body_bytes=entry.bodies.size, errors=len(result.errors),
                        reported_overhead_ms=result.server_overhead_ms))
    return rows


def _report(progress: Progress, cell: CellKey, round_: int, rounds: int, label: str,
            result: LoadResult) -> None:
    progress(f"{cell.label():<20} round {round_ + 1}/{rounds} {label:<24} n={result.n:<4} "
             f"p50={_p(result.latency_ms, 50):8.2f} ms  rps={result.rps:7.1f}"
             + (f"  errors={len(result.errors)}" if result.errors else ""))


def _p(values: list[float], q: float) -> float:
    return percentile(values, q) if values else float("nan")
