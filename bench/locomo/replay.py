"""Driving the real gateway: replay every conversation over HTTP, then probe every question.

For each conversation, client mode and budget (one tenant per budget, own API key), with one
user per conversation and mode (`X-User-Id: <sample_id>.<mode>.<run_id>`: the modes must not
share user-level memory):
- replay: one request per user message of the script —
  `stateless` sends the whole history so far under one conversation id;
  `stateful` sends only what the gateway has not seen from the client (the new user message,
  plus a leading assistant message on the first request) under one conversation id;
  `sessions` replays each LoCoMo session as a NEW conversation, stateful style;
  `continued` replays like `sessions`;
  the upstream answers the scripted reply, so the stored transcript equals the client's history;
  or, with `build="import"`, each history is brought in through the import endpoint
  (`POST /v1/memory/conversations/{id}/import`) in one request per conversation, each message
  at the time the replay's request recording it would have been sent (`import_messages`);
- then wait until the background recorder and memory worker have applied every turn (bounded);
- probe: each question as a new user message with `X-Gateway-Persist: false` — `stateless`
  after the whole history, `stateful` alone in the replayed conversation, `sessions` alone in
  a fresh conversation of the same user, `continued` alone in the last session's conversation
  (its next message: what is not in that conversation only memory from the user's other ones
  can bring); the messages the gateway forwarded are scored. A question with a date
  (LongMemEval's `question_date`) is asked as `[<date>] <question>` (`Question.asked`), the
  way the replay dates each session's first message: the gateway takes a turn's time from
  its own clock, so the date in the text is how a client tells it "now".
All conversations, modes and budgets replay concurrently (each stream sequential); probes are
independent and run concurrently, at most `concurrency` requests in flight.

The baselines (strategies.py, retrieval.py) are computed from the client's history: they do not
depend on the client mode, so they are reported with mode None. They run in a worker thread
while the gateway (its own process) replays and answers probes.
Prefix reuse is measured over the replay requests: consecutive forwarded prompts of one
conversation (gateway) or the prompts a baseline would have sent at each replay request (an
imported history has no replay requests: no gateway cost figures).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import httpx
from redis.exceptions import ResponseError

from bench.locomo.data import Conversation, Question
from bench.locomo.dump import Chat, Key, PromptDump
from bench.locomo.billing import bill
from bench.locomo.meter import PromptMeter
from bench.locomo.null_probes import null_probes, recalled_tokens
from bench.locomo.retrieval import RETRIEVERS, TurnRetriever, pack
from bench.locomo.score import Score, Scorer
from bench.locomo.script import Script, build_script, session_scripts
from bench.locomo.server import read_fail_open
from bench.locomo.strategies import baselines
from bench.dialects import PATHS, in_dialect
from bench.locomo.upstream import FORWARDED_FIELD, REPLY_FIELD
from bench.locomo.vector_cache import CachedEmbedder
from gateway.config import hash_key
from gateway.memory.embedders.use import UseEmbedder
from gateway.store import connect
from gateway.store.keys import KeySpace

RESERVE = 1000
MODEL = "bench"
MODES = ("stateless", "stateful", "sessions", "continued")
DEFAULT_MODES = ("stateless", "stateful", "sessions")
SESSION_MODES = ("sessions", "continued")
BUILDS = ("replay", "import")
"""The modes that replay each session as a conversation of its own."""


def tenant(budget: int, fold: str | None = None) -> str:
    return f"b{budget}" if fold is None else f"b{budget}-{fold}"


def api_key(budget: int, fold: str | None = None) -> str:
    return f"bench-key-{budget}" if fold is None else f"bench-key-{budget}-{fold}"


def gateway_config(store: str, budgets: Sequence[int],
                   overrides: Sequence[tuple[str, Any]] = (),
                   data_dir: str | None = None,
                   folds: Mapping[str, Mapping[str, float]] | None = None,
                   contexts: Mapping[int, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The gateway's config (YAML dict form). One tenant per budget: prompt budget B =
    max_context_tokens - reserve (the window, and what a history over it is compacted to:
    the shipped defaults are `--set context.max_context_tokens=32000 --set
    context.compact_to_tokens=8000` with B = 7000); the rest is the gateway's default, except `overrides`:
    (dotted key, value) pairs set in every tenant (`context.summary_share`), or in the whole
    config with a leading `config.` (`config.memory.index.stemming`) — for ablations.
    `data_dir`: the gateway's own (a record journal left in the working directory's ./data by
    another run must not be replayed into the benchmark's store, nor one left by it there).
    `folds`: conversation id -> learned-ranking weights trained without it; then one tenant
    per budget and conversation, recalling with its fold's weights (leave-one-out).
    `contexts`: budget -> that tenant's whole `context` section instead (the cost benchmark's
    windows and shipped defaults: bench/cost/runs.py); the budget is then only a key."""
    def tenant_config(budget: int, fold: str | None,
                      weights: Mapping[str, float] | None) -> dict[str, Any]:
        return {"api_keys": [{"sha256": hash_key(api_key(budget, fold))}],
                "models": {MODEL: {"model": "fake/echo"}},
                # the budget is both the window and what a longer history is compacted to
                "context": dict(contexts[budget]) if contexts is not None else {
                    "max_context_tokens": budget + RESERVE, "compact_to_tokens": None,
                    "reserve_completion_tokens": RESERVE},
                **({"memory": {"recall_ranker_weights": dict(weights)}}
                   if weights is not None else {})}

    config: dict[str, Any] = {
        "store": store,
        "recorder": {"mode": "background"},
        **({"server": {"data_dir": data_dir}} if data_dir is not None else {}),
        "tenants": {tenant(b, fold): tenant_config(b, fold, weights)
                    for b in budgets
                    for fold, weights in (folds.items() if folds else [(None, None)])},
    }
    for key, value in overrides:
        if key.startswith("config."):
            _set(config, key.removeprefix("config.").split("."), value)
        else:
            for t in config["tenants"].values():
                _set(t, key.split("."), value)
    return config


def _set(tree: dict[str, Any], path: Sequence[str], value: Any) -> None:
    for part in path[:-1]:
        tree = tree.setdefault(part, {})
    tree[path[-1]] = value


@dataclass(frozen=True, slots=True)
class Observation:
    question: Question
    key: Key
    score: Score
    tokens: int
    recalled: int | None = None
    """Tokens of the recalled block in the gateway's prompt (null_probes.recalled_tokens);
    None for the baselines."""


@dataclass(slots=True)
class Outcome:
    """Everything measured on one conversation."""

    observations: list[Observation] = field(default_factory=list)
    prefix_reuse: dict[Key, list[float]] = field(default_factory=lambda: defaultdict(list))
    costs: dict[Key, list[dict[str, float]]] = field(default_factory=lambda: defaultdict(list))
    """Per replay request, its input cost under each cache rule (billing.py)."""
    null_recalled: dict[Key, list[int]] = field(default_factory=lambda: defaultdict(list))
    """Per null probe (null_probes.py), the tokens of the recalled block forwarded."""
    eligible: set[int] = field(default_factory=set)
    """Questions whose whole normalised answer occurs in the history (strict figure)."""
    eligible_parts: set[int] = field(default_factory=set)
    """Questions with an answer part that occurs in the history (lenient figure)."""
    mode_mismatches: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    """Budget → probes where stateless and stateful clients got different forwarded prompts."""
    header_mismatches: int = 0
    """Probes whose x-gateway-tokens-forwarded differs from the harness's own count."""
    requests: int = 0
    fail_open_replay: int = 0
    """Replay requests the gateway answered without memory (its recall failed)."""
    fail_open_retried: int = 0
    """Probes answered without memory at first, asked again one at a time."""
    fail_open_scored: int = 0
    """Probes still answered without memory after the retries (scored as they are)."""


@dataclass(slots=True)
class _Work:
    """One conversation in flight."""

    conversation: Conversation
    script: Script
    sessions: list[Script]
    questions: Sequence[Question]
    scorer: Scorer
    outcome: Outcome
    digests: dict[tuple[str, int, int], str] = field(default_factory=dict)
    replay_ids: list[str] = field(default_factory=list)
    probes: dict[tuple[str, int, int], tuple[Chat, int, str]] = field(default_factory=dict)
    """(mode, budget, question index) → (forwarded prompt, header tokens, request id)."""


class Replayer:
    """Replays conversations through running gateway replicas at `base_urls`: each
    (conversation, mode, budget) stream sticks to one replica, round-robin."""

    def __init__(self, base_urls: Sequence[str], store_url: str, budgets: Sequence[int],
                 modes: Sequence[str], *, progress: Callable[[str], None] = lambda _: None,
                 dump: PromptDump | None = None, concurrency: int = 24,
                 fail_open_log: str | None = None, retries: int = 3,
                 drain_timeout: float = 600.0, folds: bool = False,
                 dialect: str = "chat", baselines: bool = True,
                 settle: bool = False, build: str = "replay",
                 system_prompt: str = "", vector_cache: Path | None = None) -> None:
        """`folds`: each conversation has its own tenants (`gateway_config(folds=...)`);
        `dialect`: the door requests go through, in its wire form (bench/dialects.py);
        `baselines`: compute the baseline strategies beside the gateway; `settle`: after each
        replayed request, wait until memory has caught up with every turn sent (a person
        types for seconds between turns), so what a request recalls does not depend on how
        far behind the worker was — without it a loaded run recalls less and looks cheaper;
        `build`: how the histories reach the gateway, "replay" (requests) or "import" (the
        import endpoint; see the module docstring); `system_prompt`: a system message every
        request sends first, as a client's own prompt ("": none); `vector_cache`: the plain
        retrieval's turn vectors read from (and added to) this cache
        (bench/locomo/vector_cache.py)."""
        if build not in BUILDS:
            raise ValueError(f"build must be one of {', '.join(BUILDS)}")
        self.build = build
        self.system_prompt = system_prompt
        self.baselines = baselines
        self.settle = settle
        self.dialect = dialect
        self.base_urls = tuple(base_urls)
        self.store_url = store_url
        self.budgets = tuple(budgets)
        self.modes = tuple(modes)
        self.progress = progress
        self.dump = dump
        self.concurrency = concurrency
        self.drain_timeout = drain_timeout
        self.fail_open_log = fail_open_log
        self.retries = retries
        self.folds = folds
        self.meter = PromptMeter()
        self.run_id = uuid.uuid4().hex[:8]
        self.embedder = UseEmbedder(threads=1) if vector_cache is None \
            else CachedEmbedder(vector_cache)
        self._store: Any = None
        """The store client the drain checks use, open while `_gateway` runs."""

    async def run(self, conversations: Sequence[Conversation],
                  limit: int | None = None) -> list[Outcome]:
        work = []
        for conversation in conversations:
            script = build_script(conversation)
            questions = (conversation.questions[:limit] if limit is not None
                         else conversation.questions)
            scorer = Scorer(conversation, script.messages)
            outcome = Outcome(eligible={q.index for q in questions if scorer.eligible(q)},
                              eligible_parts={q.index for q in questions
                                              if q.index in scorer.findable})
            work.append(_Work(conversation, script, session_scripts(conversation), questions,
                              scorer, outcome))
        if self.baselines:
            await asyncio.gather(self._gateway(work), asyncio.to_thread(self._baselines, work))
            if isinstance(self.embedder, CachedEmbedder):
                self.embedder.save()
        else:
            await self._gateway(work)
        for w in work:
            self._compare_modes(w)
        return [w.outcome for w in work]

    # -- the gateway ------------------------------------------------------------------------

    async def _gateway(self, work: list[_Work]) -> None:
        gate = asyncio.Semaphore(self.concurrency)
        # Idle connections expire on the client well before uvicorn's 5 s keep-alive does: a
        # connection reused just as the server closes it fails with ReadError (seen after a
        # long memory drain on a loaded machine).
        limits = httpx.Limits(max_connections=self.concurrency + 64,
                              max_keepalive_connections=self.concurrency + 64,
                              keepalive_expiry=2.0)
        async with contextlib.AsyncExitStack() as stack:
            # One store client for every drain check (after each request when settling).
            self._store = connect(self.store_url)
            stack.push_async_callback(self._store.aclose)
            clients = [await stack.enter_async_context(
                httpx.AsyncClient(base_url=url, timeout=600.0, limits=limits))
                for url in self.base_urls]
            streams = [(w, mode, b) for w in work for mode in self.modes for b in self.budgets]
            client = {(id(w), mode, b): clients[i % len(clients)]
                      for i, (w, mode, b) in enumerate(streams)}
            started = time.perf_counter()
            build = self._replay if self.build == "replay" else self._import
            await _all(build(client[(id(w), mode, b)], w, mode, b) for w, mode, b in streams)
            requests = sum(w.outcome.requests for w in work)
            self.progress(f"{self.build}: {requests} requests in "
                          f"{time.perf_counter() - started:.1f}s")
            started = time.perf_counter()
            await self._drained()
            self.progress(f"memory drained in {time.perf_counter() - started:.1f}s")
            started = time.perf_counter()
            await _all(self._probe(client[(id(w), mode, b)], gate, w, q, mode, b)
                       for w, mode, b in streams for q in w.questions)
            probes = sum(len(w.questions) for w in work) * len(self.modes) * len(self.budgets)
            self.progress(f"probed {probes} questions in {time.perf_counter() - started:.1f}s")
            await _all(self._null_probe(client[(id(w), mode, b)], gate, w, n, text, mode, b)
                       for w, mode, b in streams
                       for n, text in enumerate(null_probes(
                           [str(m.get("content") or "") for m in w.script.messages])))
            await self._retry_fail_open(work, client)
        for w in work:
            for (mode, budget, index), (prompt, header_tokens, _) in sorted(w.probes.items()):
                self._gateway_observation(w, w.conversation.questions[index], mode, budget,
                                          prompt, header_tokens)

    def _failed_open(self) -> set[str]:
        return read_fail_open(self.fail_open_log) if self.fail_open_log else set()

    async def _retry_fail_open(self, work: list[_Work], client: dict[Any, Any]) -> None:
        """Ask again, one at a time, the probes the gateway answered without memory (a store
        call timed out under load); count what stays without memory."""
        failed = self._failed_open()
        for w in work:
            w.outcome.fail_open_replay = sum(1 for r in w.replay_ids if r in failed)
        for w in work:
            for (mode, budget, index), (_, _, request_id) in list(w.probes.items()):
                if request_id not in failed:
                    continue
                w.outcome.fail_open_retried += 1
                q = w.conversation.questions[index]
                for _ in range(self.retries):
                    await self._probe(client[(id(w), mode, budget)], None, w, q, mode, budget)
                    failed = self._failed_open()
                    if w.probes[(mode, budget, index)][2] not in failed:
                        break
                else:
                    w.outcome.fail_open_scored += 1
        retried = sum(w.outcome.fail_open_retried for w in work)
        if retried or any(w.outcome.fail_open_replay for w in work):
            self.progress(f"answered without memory: "
                          f"{sum(w.outcome.fail_open_replay for w in work)} replay requests, "
                          f"{retried} probes (asked again; still without memory: "
                          f"{sum(w.outcome.fail_open_scored for w in work)})")

    def _headers(self, sample_id: str, mode: str, budget: int, conversation: str, *,
                 persist: bool = True) -> dict[str, str]:
        fold = sample_id if self.folds else None
        headers = {"Authorization": f"Bearer {api_key(budget, fold)}",
                   "X-User-Id": f"{sample_id}.{mode}.{self.run_id}",
                   "X-Conversation-Id": f"{sample_id}.{mode}.{conversation}.{self.run_id}"}
        if not persist:
            headers["X-Gateway-Persist"] = "false"
        return headers

    async def _post(self, client: httpx.AsyncClient, headers: dict[str, str],
                    messages: Chat, reply: str | None) -> tuple[Chat, int, str, int | None]:
        """(forwarded messages, x-gateway-tokens-forwarded, x-gateway-request-id,
        x-gateway-stable-messages or None) of one request."""
        if self.system_prompt:
            messages = [{"role": "system", "content": self.system_prompt}, *messages]
        body: dict[str, Any] = {"model": MODEL, "messages": messages}
        if reply is not None:
            body[REPLY_FIELD] = reply
        # Every door carries the x_ fields across: the reply asked for, the messages forwarded.
        response = await client.post(PATHS[self.dialect], headers=headers,
                                     json=in_dialect(body, self.dialect))
        if response.status_code != 200:
            raise RuntimeError(f"gateway answered {response.status_code} "
                               f"({headers['X-Conversation-Id']}): {response.text[:300]}")
        stable = response.headers.get("x-gateway-stable-messages")
        return (response.json()[FORWARDED_FIELD],
                int(response.headers["x-gateway-tokens-forwarded"]),
                response.headers.get("x-gateway-request-id", ""),
                int(stable) if stable is not None else None)

    async def _replay(self, client: httpx.AsyncClient, w: _Work, mode: str,
                      budget: int) -> None:
        sample_id = w.conversation.sample_id
        if mode in SESSION_MODES:
            for n, script in enumerate(w.sessions, start=1):
                headers = self._headers(sample_id, mode, budget, f"s{n}")
                await self._send_script(client, w, headers, script, mode, budget,
                                        stateless=False)
            return
        headers = self._headers(sample_id, mode, budget, "replay")
        await self._send_script(client, w, headers, w.script, mode, budget,
                                stateless=mode == "stateless")

    async def _import(self, client: httpx.AsyncClient, w: _Work, mode: str,
                      budget: int) -> None:
        """Each conversation of the stream brought in through the import endpoint, in one
        request (a LongMemEval history is 0.50-0.55 MB)."""
        sample_id = w.conversation.sample_id
        scripts = ([(f"s{n}", s) for n, s in enumerate(w.sessions, start=1)]
                   if mode in SESSION_MODES else [("replay", w.script)])
        for name, script in scripts:
            headers = self._headers(sample_id, mode, budget, name)
            path = f"/v1/memory/conversations/{headers['X-Conversation-Id']}/import"
            response = await client.post(path, headers=headers, json={
                "messages": import_messages(script, time.time())})
            if response.status_code != 200:
                raise RuntimeError(f"import answered {response.status_code} "
                                   f"({headers['X-Conversation-Id']}): {response.text[:300]}")
            w.outcome.requests += 1

    async def _send_script(self, client: httpx.AsyncClient, w: _Work,
                           headers: dict[str, str], script: Script, mode: str, budget: int, *,
                           stateless: bool) -> None:
        history = script.messages
        sent = 0  # stateful: messages[:sent] are known to the gateway
        previous: Chat | None = None
        previous_stable: int | None = None
        for i in script.requests:
            messages = list(history[:i + 1]) if stateless else list(history[sent:i + 1])
            sent = i + 2  # the reply is received, so the gateway knows it too
            forwarded, _, request_id, stable = await self._post(client, headers, messages,
                                                                script.reply(i))
            if self.settle:
                await self._drained()
            w.outcome.requests += 1
            w.replay_ids.append(request_id)
            if self.dump is not None:
                self.dump.write_turn(w.conversation.sample_id, headers["X-Conversation-Id"], i,
                                     ("gateway", mode, budget), forwarded, stable)
            if previous is not None:
                w.outcome.prefix_reuse[("gateway", mode, budget)].append(
                    self.meter.prefix_reuse(previous, forwarded))
            # An Anthropic route gets its breakpoint where the gateway says the stable prefix
            # ends (gateway/core/context/cache_hints.py), not at the prompt's end.
            w.outcome.costs[("gateway", mode, budget)].append(
                bill(self.meter, previous, forwarded, previous_stable, stable))
            previous, previous_stable = forwarded, stable

    async def _ask(self, client: httpx.AsyncClient, gate: asyncio.Semaphore | None, w: _Work,
                   text: str, mode: str, budget: int, fresh: str) -> tuple[Chat, int, str]:
        """A probe, not persisted: `text` after the whole history (stateless), alone in the
        replayed conversation (stateful), alone in a new conversation `fresh` of the same
        user (sessions), or alone in the last session's conversation (continued)."""
        current = {"role": "user", "content": text}
        if mode == "stateless":
            messages, conversation = [*w.script.messages, current], "replay"
        elif mode == "stateful":
            messages, conversation = [current], "replay"
        elif mode == "continued":
            messages, conversation = [current], f"s{len(w.sessions)}"
        else:
            messages, conversation = [current], fresh
        headers = self._headers(w.conversation.sample_id, mode, budget, conversation,
                                persist=False)
        async with gate or contextlib.nullcontext():
            answer = await self._post(client, headers, messages, None)
        w.outcome.requests += 1
        return answer[:3]

    async def _probe(self, client: httpx.AsyncClient, gate: asyncio.Semaphore | None, w: _Work,
                     q: Question, mode: str, budget: int) -> None:
        w.probes[(mode, budget, q.index)] = await self._ask(client, gate, w, q.asked, mode,
                                                            budget, f"q{q.index}")

    async def _null_probe(self, client: httpx.AsyncClient, gate: asyncio.Semaphore, w: _Work,
                          n: int, text: str, mode: str, budget: int) -> None:
        """A message that needs no memory, asked like a question: what recall adds to it."""
        prompt, _, _ = await self._ask(client, gate, w, text, mode, budget, f"null{n}")
        if self.dump is not None:
            self.dump.write_null(w.conversation.sample_id, n, ("gateway", mode, budget), prompt)
        w.outcome.null_recalled[("gateway", mode, budget)].append(
            recalled_tokens(self.meter, prompt))

    def _gateway_observation(self, w: _Work, q: Question, mode: str, budget: int,
                             prompt: Chat, header_tokens: int) -> None:
        sample_id = w.conversation.sample_id
        tokens = self.meter.tokens(prompt)
        w.outcome.header_mismatches += tokens != header_tokens
        w.digests[(mode, budget, q.index)] = _digest(prompt)
        key: Key = ("gateway", mode, budget)
        w.outcome.observations.append(Observation(q, key, w.scorer.score(q, prompt), tokens,
                                                  recalled_tokens(self.meter, prompt)))
        if self.dump is not None:
            self.dump.write(sample_id, q, key, prompt)

    def _compare_modes(self, w: _Work) -> None:
        if not {"stateless", "stateful"} <= set(self.modes):
            return
        for b in self.budgets:
            w.outcome.mode_mismatches[b] += sum(
                w.digests[("stateless", b, q.index)] != w.digests[("stateful", b, q.index)]
                for q in w.questions)

    async def _drained(self) -> None:
        """Wait until the recorder has applied every enqueued turn (the record stream is empty
        and its group has nothing pending) and the memory worker has processed them (no
        conversation left dirty). Raises TimeoutError after `drain_timeout`."""
        keys, redis = KeySpace(), self._store
        deadline = time.monotonic() + self.drain_timeout
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
            await asyncio.sleep(0.1)

    # -- the baselines (a worker thread) ----------------------------------------------------

    def _baselines(self, work: list[_Work]) -> None:
        started = time.perf_counter()
        for w in work:
            self._baseline_reuse(w)
            self._plain_baselines(w)
            self._retrieval_baselines(w)
        self.progress(f"baselines computed in {time.perf_counter() - started:.1f}s")

    def _baseline_reuse(self, w: _Work) -> None:
        history = w.script.messages
        for (strategy, budget), build in baselines(self.budgets, self.meter).items():
            previous: list[Any] | None = None
            for i in w.script.requests:
                prompt = build(history[:i], history[i])
                if previous is not None:
                    w.outcome.prefix_reuse[(strategy, None, budget)].append(
                        self.meter.prefix_reuse(previous, prompt))
                w.outcome.costs[(strategy, None, budget)].append(
                    bill(self.meter, previous, prompt))
                previous = prompt

    def _plain_baselines(self, w: _Work) -> None:
        history = list(w.script.messages)
        for (strategy, budget), build in baselines(self.budgets, self.meter).items():
            for q in w.questions:
                prompt = build(history, {"role": "user", "content": q.asked})
                self._observe(w, q, (strategy, None, budget), prompt)

    def _retrieval_baselines(self, w: _Work) -> None:
        retriever = TurnRetriever(w.conversation, self.embedder)
        rankings = retriever.rank([q.question for q in w.questions])
        for q, ranking in zip(w.questions, rankings):
            current = {"role": "user", "content": q.asked}
            for strategy in RETRIEVERS:
                for budget in self.budgets:
                    prompt = pack(retriever.lines, ranking.by_name(strategy), current, budget,
                                  self.meter)
                    self._observe(w, q, (strategy, None, budget), prompt)

    def _observe(self, w: _Work, q: Question, key: Key, prompt: list[Any]) -> None:
        w.outcome.observations.append(
            Observation(q, key, w.scorer.score(q, prompt), self.meter.tokens(prompt)))
        if self.dump is not None:
            self.dump.write(w.conversation.sample_id, q, key, prompt)


def import_messages(script: Script, start: float) -> Chat:
    """The script's messages as an import body's: each at the time the replay's request that
    records it would be sent — request r (0-based) at `start` + r ms, recording the messages
    after the previous request's reply up to its own reply (a leading assistant message goes
    with the first) — so the import makes the records the replay makes."""
    out: Chat = []
    done = 0
    for r, i in enumerate(script.requests):
        at = start + r / 1000
        out += [{**m, "created_at": at} for m in script.messages[done:i + 2]]
        done = i + 2
    at = start + max(0, len(script.requests) - 1) / 1000
    return out + [{**m, "created_at": at} for m in script.messages[done:]]


def _digest(prompt: Chat) -> str:
    return hashlib.sha256(json.dumps(prompt, sort_keys=True).encode()).hexdigest()


async def _all(tasks: Any) -> None:
    """Run the coroutines concurrently; the first failure cancels the rest and is raised."""
    async with asyncio.TaskGroup() as group:
        for coroutine in tasks:
            group.create_task(coroutine)
