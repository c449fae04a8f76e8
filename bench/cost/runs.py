"""One data set measured: the gateway's assemblies replayed through the real gateway (the
LoCoMo harness: bench/locomo/replay.py), the client's own computed from its history
(client.py), every request billed (tally.py) and every probe scored, in one run.

The assemblies (issue 23's names):
- `gateway`: the gateway as shipped, its window (`context.max_context_tokens`) set to each
  of the windows — a history that fits goes whole, a longer one is compacted to the shipped
  `compact_to_tokens` (8,000, at most the window). At the shipped window (32,000) the tenant
  has no context settings at all: budget `"default"`;
- `before`: the assembly the gateway shipped before issue 23, on today's code by its settings —
  compacted to the window itself (`compact_to_tokens: null`), the `rolling` layout, no
  continuity rule (`continuity_turns: 0`), memory from outside a whole history as large as
  the room allows (`outside_share: 1`). What it cannot restore: the profile went before a
  whole history then (there is no profile here: a benchmark user has one conversation or,
  for `user-5-conversations`, the profile is built alike for both);
- `truncate`: the newest messages that fit the window less the completion's reserve, cut in
  steps (client.py);
- `whole`: the whole history (one row per data set: it has no budget).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import accumulate
from typing import IO, Any, Callable, Sequence

from bench.cost.client import SteppedTruncation, whole
from bench.cost.data import DataSet
from bench.cost.system_prompt import system_prompt
from bench.cost.tally import Tally
from bench.locomo.cli import run as serve_and_replay
from bench.locomo.data import Conversation
from bench.locomo.meter import PromptMeter
from bench.locomo.dump import PromptDump
from bench.locomo.replay import RESERVE, SESSION_MODES, Outcome
from bench.locomo.score import Score, Scorer
from bench.locomo.script import Script, build_script, session_scripts
from bench.locomo.null_probes import null_probes
from gateway.core.policy import ContextPolicy
from gateway.core.text.tokens import REPLY_PRIMING

ASSEMBLIES = ("whole", "truncate", "before", "gateway")
SERVED = ("before", "gateway")
DEFAULT_WINDOW = ContextPolicy().max_context_tokens
Budget = int | str | None


@dataclass(frozen=True, slots=True)
class Cell:
    assembly: str
    budget: Budget
    """The window in tokens; "default" for the gateway as shipped; None for `whole`."""


@dataclass(slots=True)
class Measured:
    data: DataSet
    tallies: dict[Cell, Tally]
    system_prompt_tokens: int = 0
    """The client's own system prompt, sent first in every request (bench/cost/system_prompt.py)."""
    brief_tokens: int | None = None
    """The served assemblies' `memory.brief_tokens` (None: as shipped)."""
    scores: dict[Cell, list[Score]] = field(default_factory=lambda: defaultdict(list))
    null_tokens: dict[Cell, list[int]] = field(default_factory=lambda: defaultdict(list))
    seconds: float = 0.0


def cells(assemblies: tuple[str, ...], windows: tuple[int, ...]) -> list[Cell]:
    out: list[Cell] = [Cell("whole", None)] if "whole" in assemblies else []
    for assembly in ("truncate", "before", "gateway"):
        if assembly in assemblies:
            out += [Cell(assembly, "default" if assembly == "gateway" and w == DEFAULT_WINDOW
                         else w) for w in windows]
    if "gateway" in assemblies and DEFAULT_WINDOW not in windows:
        out.append(Cell("gateway", "default"))
    return out


def context(cell: Cell) -> dict[str, Any]:
    """The tenant's `context` section for a served cell."""
    if cell.budget == "default":
        return {}
    if cell.assembly == "gateway":
        return {"max_context_tokens": cell.budget}
    return {"max_context_tokens": cell.budget, "compact_to_tokens": None,
            "assembly": "rolling", "continuity_turns": 0, "outside_share": 1.0}


def measure(data: DataSet, grid: list[Cell], *, folds: dict[str, dict[str, float]] | None,
            overrides: Sequence[tuple[str, Any]] = (), drain_timeout: float = 600.0,
            concurrency: int, processes: int, dump: IO[str] | None,
            progress: Callable[[str], None], system_prompt_tokens: int = 0,
            brief_tokens: int | None = None) -> Measured:
    """`system_prompt_tokens`: the client's own system prompt (every request sends it
    first); `brief_tokens`: the served assemblies' `memory.brief_tokens` (None: as shipped,
    or as `overrides` say)."""
    started = time.perf_counter()
    meter = PromptMeter()
    measured = Measured(data, {cell: Tally(meter) for cell in grid}, system_prompt_tokens,
                        brief_tokens)
    system = _system_messages(system_prompt_tokens, meter)
    if brief_tokens is not None:
        overrides = [*overrides, ("memory.brief_tokens", brief_tokens)]
    threads = {c.sample_id: _threads(data, c, meter, system) for c in data.conversations}
    served = {k: cell for k, cell in enumerate((c for c in grid if c.assembly in SERVED), 1)}
    if served:
        progress(f"{data.name}: replaying through the gateway for "
                 f"{', '.join(f'{c.assembly}@{c.budget}' for c in served.values())}")
        _served(data, served, measured, threads, folds=folds, overrides=overrides,
                drain_timeout=drain_timeout, concurrency=concurrency, processes=processes,
                dump=dump, **({"system_prompt": system[0]["content"]} if system else {}))
    for cell in grid:
        if cell.assembly not in SERVED:
            progress(f"{data.name}: {cell.assembly}@{cell.budget} computed from the history")
            _client(data, cell, measured, threads, dump, system)
    measured.seconds = round(time.perf_counter() - started, 1)
    return measured


@dataclass(frozen=True, slots=True)
class _Thread:
    label: str
    """"replay", or "s<n>" for the n-th session of the `sessions` and `continued` modes."""
    script: Script
    history_tokens: tuple[int, ...]
    """The client's whole prompt's tokens at each message index (history up to it)."""


def _system_messages(tokens: int, meter: PromptMeter) -> list[dict[str, str]]:
    """The client's system prompt as the messages it sends first (none for 0)."""
    return [{"role": "system", "content": system_prompt(tokens, meter)}] if tokens > 0 else []


def _threads(data: DataSet, conversation: Conversation, meter: PromptMeter,
             system: list[dict[str, str]]) -> list[_Thread]:
    """The billed threads of a conversation (the history's tokens include the client's
    system prompt)."""
    if data.mode not in SESSION_MODES:
        scripts = [("replay", build_script(conversation))]
    else:
        scripts = [(f"s{n}", s) for n, s in enumerate(session_scripts(conversation), 1)
                   if n == data.billed_session]
    before = sum(meter.message_tokens(m) for m in system)
    return [_Thread(label, script, tuple(before + t for t in accumulate(
        meter.message_tokens(m) for m in script.messages)))
            for label, script in scripts]


def _served(data: DataSet, served: dict[int, Cell], measured: Measured,
            threads: dict[str, list[_Thread]], **options: Any) -> None:
    dump_file = options.pop("dump")
    with tempfile.TemporaryFile("w+", encoding="utf-8") as raw:
        outcomes = serve_and_replay(
            list(data.conversations), budgets=list(served), modes=[data.mode], limit=None,
            store=None, dump=PromptDump(raw), baselines=False, settle=True,
            contexts={k: context(c) for k, c in served.items()}, **options)
        raw.seek(0)
        turns: dict[tuple[int, str, str], list[tuple[int, Any, int | None]]] = defaultdict(list)
        for line in raw:
            record = json.loads(line)
            if record["qa"] is None and "turn" in record:
                label = record["thread"].split(".")[-2]
                if all(t.label != label for t in threads[record["conversation"]]):
                    continue  # a session not billed: neither counted nor dumped
                turns[(record["budget"], record["conversation"], label)].append(
                    (record["turn"], record["messages"], record.get("stable")))
            if dump_file is not None:
                _dump(dump_file, data, served[record["budget"]], record)
    for (key, sample_id, label), requests in turns.items():
        thread = next(t for t in threads[sample_id] if t.label == label)
        tally = measured.tallies[served[key]]
        for turn, messages, stable in sorted(requests, key=lambda r: r[0]):
            tally.add(f"{sample_id}/{label}", turn, messages, stable, _history(thread, turn))
    _observed(outcomes, served, measured)


def _observed(outcomes: list[Outcome], served: dict[int, Cell], measured: Measured) -> None:
    for outcome in outcomes:
        for obs in outcome.observations:
            measured.scores[served[obs.key[2]]].append(obs.score)
        for (_, _, key), tokens in outcome.null_recalled.items():
            measured.null_tokens[served[key]].extend(tokens)


def _client(data: DataSet, cell: Cell, measured: Measured, threads: dict[str, list[_Thread]],
            dump: IO[str] | None, system: list[dict[str, str]]) -> None:
    """The client's own assemblies; `system`: its system prompt, sent first in every prompt
    (the truncated history gets what it leaves)."""
    tally = measured.tallies[cell]
    reserved = tally.meter.tokens(system) if system else 0
    for conversation in data.conversations:
        truncation = None
        for thread in threads[conversation.sample_id]:
            messages = thread.script.messages
            truncation = SteppedTruncation(int(cell.budget) - RESERVE - reserved, tally.meter) \
                if cell.assembly == "truncate" else None
            for i in thread.script.requests:
                prompt = system + (whole(messages[:i], messages[i]) if truncation is None
                                   else truncation.prompt(messages[:i], messages[i]))
                tally.add(f"{conversation.sample_id}/{thread.label}", i, prompt, None,
                          _history(thread, i))
                if dump is not None and truncation is not None:
                    _dump(dump, data, cell, {"conversation": conversation.sample_id,
                                             "turn": i, "qa": None, "messages": prompt})
        history = list(build_script(conversation).messages)
        scorer = Scorer(conversation, history)
        asked_after = list(threads[conversation.sample_id][-1].script.messages) \
            if data.mode == "continued" else history
        for q in conversation.questions:
            prompt = system + _probe(data, asked_after, q.question, truncation)
            measured.scores[cell].append(scorer.score(q, prompt))
            if dump is not None and truncation is not None:
                _dump(dump, data, cell, {"conversation": conversation.sample_id, "turn": None,
                                         "qa": q.index, "messages": prompt})
        measured.null_tokens[cell].extend(0 for _ in null_probes(
            [str(m.get("content") or "") for m in history]))


def _probe(data: DataSet, history: list[Any], question: str,
           truncation: SteppedTruncation | None) -> list[Any]:
    """The client's prompt for a probe: after `history` (`continued`: the last session's), or
    alone in a new conversation (`sessions`: the question is asked in a conversation of its
    own)."""
    current = {"role": "user", "content": question}
    if data.mode == "sessions":
        return [current]
    if truncation is None:
        return whole(history, current)
    return truncation.prompt(history, current, keep=False)


def _history(thread: _Thread, turn: int) -> int:
    return REPLY_PRIMING + thread.history_tokens[turn]  # as PromptMeter.tokens counts


def _dump(file: IO[str], data: DataSet, cell: Cell, record: dict[str, Any]) -> None:
    """One line of `--dump-prompts` in issue 23's shape."""
    probe = "null" if "null" in record else record.get("qa")
    if isinstance(probe, int):
        probe = data.file_index(record["conversation"], probe)
    file.write(json.dumps({"data": data.name, "conversation": record["conversation"],
                           "thread": record.get("thread"),
                           "turn": record.get("turn") if probe is None else None,
                           "assembly": cell.assembly, "budget": cell.budget, "probe": probe,
                           "stable": record.get("stable"), "messages": record["messages"]},
                          ensure_ascii=False) + "\n")
