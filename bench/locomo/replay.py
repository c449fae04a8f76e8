"""Driving the real gateway: replay each conversation over HTTP, then probe every question.

Per conversation, for each client mode and budget (one tenant per budget, own API key):
- replay: one request per user message of the script — `stateless` sends the whole history
  so far, `stateful` only what the gateway has not seen from the client (the new user message,
  plus a leading assistant message on the first request) with `X-Conversation-Id`; the
  upstream answers the scripted reply, so the stored transcript equals the client's history;
- then wait until the background recorder has applied every turn (bounded);
- probe: each question as a new user message with `X-Gateway-Persist: false`; the messages
  the gateway forwarded are scored.
The baselines (strategies.py) are computed from the client's full history: they do not depend
on the client mode, so they are reported once with mode None.
Prefix reuse is measured over the replay requests: consecutive forwarded prompts (gateway) or
the prompts a baseline would have sent at each replay request.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import httpx
from redis.exceptions import ResponseError

from bench.locomo.data import Conversation, Question
from bench.locomo.meter import PromptMeter
from bench.locomo.score import Score, Scorer
from bench.locomo.script import Script, build_script
from bench.locomo.strategies import baselines
from bench.locomo.upstream import TAG_FIELD, ScriptedUpstream
from gateway.config import Config, hash_key, parse_config
from gateway.store import connect
from gateway.store.keys import KeySpace

RESERVE = 1000
MODEL = "bench"
MODES = ("stateless", "stateful")
Key = tuple[str, str | None, int | None]
"""(strategy, mode, budget)."""


def tenant(budget: int) -> str:
    return f"b{budget}"


def api_key(budget: int) -> str:
    return f"bench-key-{budget}"


def gateway_config(store: str, budgets: Sequence[int]) -> Config:
    """One tenant per budget: prompt budget B = max_context_tokens - reserve; the rest of the
    context policy is the gateway's default."""
    return parse_config({
        "store": store,
        "recorder": {"mode": "background"},
        "tenants": {tenant(b): {"api_keys": [{"sha256": hash_key(api_key(b))}],
                                "models": {MODEL: {"model": "fake/echo"}},
                                "context": {"max_context_tokens": b + RESERVE,
                                            "reserve_completion_tokens": RESERVE}}
                    for b in budgets},
    })


@dataclass(frozen=True, slots=True)
class Observation:
    question: Question
    key: Key
    score: Score
    tokens: int


@dataclass(slots=True)
class Outcome:
    """Everything measured on one conversation."""

    observations: list[Observation] = field(default_factory=list)
    prefix_reuse: dict[Key, list[float]] = field(default_factory=lambda: defaultdict(list))
    eligible: set[int] = field(default_factory=set)
    mode_mismatches: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    """Budget → probes where stateless and stateful clients got different forwarded prompts."""
    header_mismatches: int = 0
    """Probes whose x-gateway-tokens-forwarded differs from the harness's own count."""
    requests: int = 0


class Replayer:
    """Replays conversations through a running gateway at `base_url`."""

    def __init__(self, base_url: str, upstream: ScriptedUpstream, store_url: str,
                 budgets: Sequence[int], modes: Sequence[str], *,
                 progress: Callable[[str], None] = lambda _: None,
                 drain_timeout: float = 120.0) -> None:
        self.base_url = base_url
        self.upstream = upstream
        self.store_url = store_url
        self.budgets = tuple(budgets)
        self.modes = tuple(modes)
        self.progress = progress
        self.drain_timeout = drain_timeout
        self.meter = PromptMeter()
        self.run_id = uuid.uuid4().hex[:8]

    async def run(self, conversation: Conversation, limit: int | None = None) -> Outcome:
        script = build_script(conversation)
        history = list(script.messages)
        questions = conversation.questions[:limit] if limit is not None else conversation.questions
        scorer = Scorer(conversation, history)
        outcome = Outcome(eligible={q.index for q in questions if scorer.eligible(q)})
        self._baseline_reuse(script, outcome)
        async with httpx.AsyncClient(base_url=self.base_url, timeout=120.0) as client:
            started = time.perf_counter()
            await _all(self._replay(client, conversation.sample_id, script, mode, b, outcome)
                       for mode in self.modes for b in self.budgets)
            self.progress(f"{conversation.sample_id}: replayed {len(script.requests)} requests x "
                          f"{len(self.modes) * len(self.budgets)} in "
                          f"{time.perf_counter() - started:.1f}s")
            await self._drained()
            started = time.perf_counter()
            forwarded: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
            await _all(self._probe(client, conversation.sample_id, history, questions, mode, b,
                                   scorer, outcome, forwarded)
                       for mode in self.modes for b in self.budgets)
        self._probe_baselines(history, questions, scorer, outcome)
        self._compare_modes(questions, forwarded, outcome)
        self.progress(f"{conversation.sample_id}: probed {len(questions)} questions in "
                      f"{time.perf_counter() - started:.1f}s")
        return outcome

    def _baseline_reuse(self, script: Script, outcome: Outcome) -> None:
        history = script.messages
        for (strategy, budget), build in baselines(self.budgets, self.meter).items():
            previous: list[Any] | None = None
            for i in script.requests:
                prompt = build(history[:i], history[i])
                if previous is not None:
                    outcome.prefix_reuse[(strategy, None, budget)].append(
                        self.meter.prefix_reuse(previous, prompt))
                previous = prompt

    def _headers(self, sample_id: str, mode: str, budget: int, *,
                 persist: bool = True) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {api_key(budget)}",
                   "X-Conversation-Id": f"{sample_id}.{mode}.{self.run_id}"}
        if not persist:
            headers["X-Gateway-Persist"] = "false"
        return headers

    async def _post(self, client: httpx.AsyncClient, headers: dict[str, str],
                    messages: list[dict[str, str]], tag: str) -> tuple[list[dict[str, Any]], int]:
        """(forwarded messages, x-gateway-tokens-forwarded) of one request."""
        response = await client.post("/v1/chat/completions", headers=headers,
                                     json={"model": MODEL, "messages": messages, TAG_FIELD: tag})
        if response.status_code != 200:
            raise RuntimeError(f"gateway answered {response.status_code} to {tag}: "
                               f"{response.text[:300]}")
        return self.upstream.take(tag), int(response.headers["x-gateway-tokens-forwarded"])

    async def _replay(self, client: httpx.AsyncClient, sample_id: str, script: Script,
                      mode: str, budget: int, outcome: Outcome) -> None:
        headers = self._headers(sample_id, mode, budget)
        history = script.messages
        sent = 0  # stateful: messages[:sent] are known to the gateway
        previous: list[dict[str, Any]] | None = None
        for i in script.requests:
            tag = f"{sample_id}|{mode}|{budget}|r{i}"
            self.upstream.script(tag, script.reply(i))
            messages = list(history[:i + 1]) if mode == "stateless" else list(history[sent:i + 1])
            sent = i + 2  # the reply is received, so the gateway knows it too
            forwarded, _ = await self._post(client, headers, messages, tag)
            outcome.requests += 1
            if previous is not None:
                outcome.prefix_reuse[("gateway", mode, budget)].append(
                    self.meter.prefix_reuse(previous, forwarded))
            previous = forwarded

    async def _probe(self, client: httpx.AsyncClient, sample_id: str, history: list[dict[str, str]],
                     questions: Sequence[Question], mode: str, budget: int, scorer: Scorer,
                     outcome: Outcome, forwarded: dict[tuple[str, int, int], list[dict[str, Any]]]
                     ) -> None:
        headers = self._headers(sample_id, mode, budget, persist=False)
        for q in questions:
            current = {"role": "user", "content": q.question}
            messages = [*history, current] if mode == "stateless" else [current]
            prompt, header_tokens = await self._post(
                client, headers, messages, f"{sample_id}|{mode}|{budget}|q{q.index}")
            outcome.requests += 1
            tokens = self.meter.tokens(prompt)
            outcome.header_mismatches += tokens != header_tokens
            forwarded[(mode, budget, q.index)] = prompt
            outcome.observations.append(
                Observation(q, ("gateway", mode, budget), scorer.score(q, prompt), tokens))

    def _probe_baselines(self, history: list[dict[str, str]], questions: Sequence[Question],
                         scorer: Scorer, outcome: Outcome) -> None:
        for (strategy, budget), build in baselines(self.budgets, self.meter).items():
            for q in questions:
                prompt = build(history, {"role": "user", "content": q.question})
                outcome.observations.append(Observation(
                    q, (strategy, None, budget), scorer.score(q, prompt),
                    self.meter.tokens(prompt)))

    def _compare_modes(self, questions: Sequence[Question],
                       forwarded: dict[tuple[str, int, int], list[dict[str, Any]]],
                       outcome: Outcome) -> None:
        if not set(MODES) <= set(self.modes):
            return
        for b in self.budgets:
            outcome.mode_mismatches[b] += sum(
                forwarded[("stateless", b, q.index)] != forwarded[("stateful", b, q.index)]
                for q in questions)

    async def _drained(self) -> None:
        """Wait until the recorder has applied every enqueued turn (the record stream is empty
        and its group has nothing pending) and the memory worker has processed them (no
        conversation left dirty). Raises TimeoutError after `drain_timeout`."""
        keys = KeySpace()
        redis = connect(self.store_url)
        deadline = time.monotonic() + self.drain_timeout
        try:
            while True:
                length = await redis.xlen(keys.records)
                try:
                    pending = (await redis.xpending(keys.records, keys.group))["pending"]
                except ResponseError:  # no group yet: nothing was ever read
                    pending = 0
                dirty = await redis.zcard(keys.memory_dirty)
                if length == 0 and pending == 0 and dirty == 0:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"recorder not drained after {self.drain_timeout}s: "
                                       f"{length} entries, {pending} pending, {dirty} dirty")
                await asyncio.sleep(0.05)
        finally:
            await redis.aclose()


async def _all(tasks: Any) -> None:
    """Run the coroutines concurrently; the first failure cancels the rest and is raised."""
    async with asyncio.TaskGroup() as group:
        for coroutine in tasks:
            group.create_task(coroutine)

