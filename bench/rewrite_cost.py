"""What `core.rewrite` costs per request at 50 and 300 stored turns: is it flat in length?

`python -m bench rewrite-cost [--runs 60] [--before FILE]` prints a table and writes
`bench/results/rewrite-cost.json` and `.md`. Synthetic, seeded inputs shaped like a served
request with memory on: one system prompt, `turns` stored turns (a user message and its reply,
as the overhead benchmark stores them: 2 x `turns` messages) of ~60-120 tokens per message
(English, a Chinese one in four, a date anchor now and then), the current user message;
memory holds a summary chunk per 7 turns (at most 30, the compactor's cap) covering all but
the newest 4 turns, a profile, and 50 recollections (8 facts, 32 messages of this
conversation, 10 chunks), best first.
The policy is the default one with a summary share (0.2 summary, 0.05 profile, 0.5 recall),
counted with o200k_base. Budgets: 2,000 and 8,000 prompt tokens, and `fits` (128,000: the
whole history is forwarded, so that row's output grows with the conversation).

Each run rewrites a request decoded afresh from JSON (new strings, as the request path
decodes the stored transcript), timed alone, with the recollections ranked in another order
(as another question would rank them: the recalled block differs from run to run). Runs go
round-robin over the six cases, so a change in the machine's load touches all of them alike;
the median over `--runs` runs per case is reported after warm-up runs, the steady state of a
long-running server. `cold ms` is the median of five first rewrites, each on a newly built
tokenizer (nothing counted before, nothing cached). `--same-objects` reuses one decoded
history per case instead (what a per-conversation transcript cache would hand the rewrite:
the texts keep their hash), only the recollections change per run.
`--before FILE` adds the figures of an earlier run of this benchmark (the same script run on
an older commit) side by side.

The history's costs come as the request path gets them (gateway/pipeline/history_costs.py): each
timed run is a stateless client's next request — a memo holding the costs of the history
without its last two messages (the previous request's, filled untimed), the costs of this
request's history taken from it (timed: the lookup, counting the two new messages) and passed
to the rewrite. `--recount` measures the rewrite counting every history message itself (the
request path before that memo).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.machine import machine
from bench.output import write_result
from gateway.core.context.blocks import MemoryContext
from gateway.core.messages import Message
from gateway.core.policy import ContextPolicy
from gateway.core.recall.recollection import Recollection
from gateway.core.context.rewrite import RewriteRequest, rewrite
from gateway.pipeline.history_costs import HistoryCosts
from gateway.tokenizer import O200K, TiktokenTokenizer, tokenizer_for_encoding

TURNS = (50, 300)
BUDGETS: tuple[tuple[str, int], ...] = (("2000", 2_000), ("8000", 8_000), ("fits", 128_000))
COLD_RUNS = 5

_EN = ["{p} told me about {t} at {l}, and I have been thinking about it since.",
       "Yesterday {p} and I went to {l} for {t}; it took {n} hours in the end.",
       "Could you help me plan {t} near {l}? {p} wants to come along.",
       "I would suggest starting with {t} early in the morning, before {l} gets crowded.",
       "{p} finally fixed {t} after {n} weeks, which nobody expected.",
       "The main risk with {t} is the weather at {l}, so keep a backup plan ready."]
_PEOPLE = ["Caroline", "Melanie", "my brother", "our neighbour", "the new manager", "Grandma"]
_PLACES = ["the harbour", "Lisbon", "the climbing gym", "a tiny bakery", "the museum", "Kyoto"]
_THINGS = ["a vintage camera", "sourdough bread", "a charity run", "pottery classes",
           "a jazz concert", "the garden shed", "a used bicycle", "a book about whales"]
_ZH = ["{p}上周在{l}{t}，花了不少时间，但是大家都觉得很值得。",
       "我和{p}打算下个月去{l}{t}，你有什么建议吗？",
       "{p}说在{l}{t}很有意思，我们下次一起去吧。"]
_ZH_PEOPLE = ["小王", "我妈妈", "同事李娜", "邻居", "老张"]
_ZH_PLACES = ["杭州", "公司楼下", "西湖边", "健身房", "老家"]
_ZH_THINGS = ["学做蛋糕", "跑马拉松", "买了一台相机", "去爬山", "学弹钢琴"]


def _sentence(rng: random.Random) -> str:
    if rng.random() < 0.25:
        return rng.choice(_ZH).format(p=rng.choice(_ZH_PEOPLE), l=rng.choice(_ZH_PLACES),
                                      t=rng.choice(_ZH_THINGS))
    return rng.choice(_EN).format(p=rng.choice(_PEOPLE), l=rng.choice(_PLACES),
                                  t=rng.choice(_THINGS), n=rng.randint(2, 30))


def _text(rng: random.Random, tokens: int, tokenizer: TiktokenTokenizer) -> str:
    out = ""
    while tokenizer.count(out) < tokens:
        out = f"{out} {_sentence(rng)}".strip()
    return out


def scenario(turns: int, seed: int, tokenizer: TiktokenTokenizer) -> dict[str, Any]:
    """The request and memory of one conversation of `turns` stored messages, as JSON data."""
    rng = random.Random(seed)
    history = []
    for i in range(2 * turns):
        text = _text(rng, rng.randint(60, 120), tokenizer)
        if i % 40 == 0:
            text = f"[{1 + i // 40} May, 2023] {text}"
        history.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    ids = [f"m{i:04d}" for i in range(len(history))]
    covered = max(0, len(history) - 8)
    n_chunks = min(30, turns // 7)
    chunks = []
    for c in range(n_chunks):
        span = ids[c * covered // n_chunks:(c + 1) * covered // n_chunks]
        chunks.append({"text": f"[{1 + c} May, 2023] " + _text(rng, 150, tokenizer),
                       "ids": span})
    recalled = [{"kind": "fact", "id": f"fact:{k}", "text": f"{k}: {v}", "source_ids": [],
                 "position": -1}
                for k, v in [("user_location", "Lisbon"), ("user_pet", "a grey cat named Miso"),
                             ("user_job", "nurse on night shifts"), ("user_language", "中文"),
                             ("user_sport", "climbing twice a week"),
                             ("user_diet", "vegetarian"), ("user_brother", "lives in Kyoto"),
                             ("user_hobby", "pottery and sourdough baking")]]
    for i in sorted(rng.sample(range(len(history)), min(32, len(history)))):
        recalled.append({"kind": "turn", "id": ids[i], "text": history[i]["content"],
                         "source_ids": [ids[i]], "position": i})
    for c in rng.sample(range(n_chunks), min(10, n_chunks)):
        recalled.append({"kind": "chunk", "id": f"chunk:{c}", "text": chunks[c]["text"],
                         "source_ids": chunks[c]["ids"], "position": c * 14})
    rng.shuffle(recalled)  # ranked by relevance, not by place
    return {
        "instructions": [{"role": "system", "content": _text(rng, 50, tokenizer)}],
        "history": history, "ids": ids,
        "current": [{"role": "user", "content": _text(rng, 30, tokenizer)}],
        "chunks": [c["text"] for c in chunks],
        "summarized_through": ids[covered - 1] if covered and n_chunks else None,
        "profile": "Prefers short answers in English; an expert cook; metric units.",
        "recalled": recalled,
    }


def request(data: str, budget: int, variant: int = 0) -> RewriteRequest:
    """The rewrite request of a scenario, decoded from its JSON text (fresh strings), with
    the recollections in the rank order of `variant`."""
    s = json.loads(data)
    random.Random(variant).shuffle(s["recalled"])
    recalled = tuple(Recollection(r["kind"], r["id"], r["text"], tuple(r["source_ids"]),
                                  r["position"], 1.0 - n / 100)
                     for n, r in enumerate(s["recalled"]))
    memory = MemoryContext(summary_chunks=tuple(s["chunks"]), profile=s["profile"],
                           recalled=recalled, summarized_through=s["summarized_through"])
    policy = ContextPolicy(max_context_tokens=budget, reserve_completion_tokens=0,
                           summary_share=0.2, profile_share=0.05, recall_share=0.5)
    return RewriteRequest(
        instructions=tuple(Message.from_openai(m) for m in s["instructions"]),
        history=tuple(Message.from_openai(m) for m in s["history"]),
        current=tuple(Message.from_openai(m) for m in s["current"]),
        policy=policy, memory=memory, history_ids=tuple(s["ids"]))


def measure(cases: list[tuple[int, str, int]], runs: int,
            same_objects: bool = False, recount: bool = False) -> list[dict[str, Any]]:
    """Median times of rewriting each (turns, label, budget) case, the runs interleaved."""
    tokenizer = tokenizer_for_encoding(O200K)
    data = {turns: json.dumps(scenario(turns, seed=turns, tokenizer=TiktokenTokenizer(O200K)),
                              ensure_ascii=False) for turns in {c[0] for c in cases}}
    cold: dict[tuple[int, str, int], list[float]] = {case: [] for case in cases}
    for case in cases:
        for _ in range(COLD_RUNS):
            fresh, req = TiktokenTokenizer(O200K), request(data[case[0]], case[2])
            started = time.perf_counter()
            rewrite(req, fresh)
            cold[case].append((time.perf_counter() - started) * 1e3)
    times: dict[tuple[int, str, int], list[float]] = {case: [] for case in cases}
    last = {}
    base = {case: request(data[case[0]], case[2]) for case in cases}
    for run in range(-5, runs):  # five warm-up rounds: the server has seen these before
        for case in cases:
            req = request(data[case[0]], case[2], variant=run)
            if same_objects:
                req = dataclasses.replace(base[case], memory=req.memory)
            memo = HistoryCosts()
            if not recount:  # the previous request, two messages shorter
                memo.costs(req.history[:-2], req.history_ids[:-2], tokenizer)
            started = time.perf_counter()
            if not recount:
                req = dataclasses.replace(req, history_costs=memo.costs(
                    req.history, req.history_ids, tokenizer))
            last[case] = rewrite(req, tokenizer)
            if run >= 0:
                times[case].append((time.perf_counter() - started) * 1e3)
    rows = []
    for case in cases:
        turns, label, budget = case
        t, out = sorted(times[case]), last[case]
        rows.append({"turns": turns, "budget": label, "prompt_budget": budget, "runs": runs,
                     "median_ms": round(statistics.median(t), 3),
                     "p90_ms": round(t[int(0.9 * (len(t) - 1))], 3),
                     "cold_ms": round(statistics.median(cold[case]), 3),
                     "tokens_original": out.tokens_original,
                     "tokens_forwarded": out.tokens_forwarded,
                     "messages_forwarded": len(out.messages), "recalled": out.recalled,
                     "summary_chunks": out.summary_chunks})
    return rows


def ratios(rows: list[dict[str, Any]], key: str = "median_ms") -> dict[str, float]:
    """Cost at the most turns over cost at the fewest, per budget."""
    out = {}
    for label, _ in BUDGETS:
        by_turns = {r["turns"]: r[key] for r in rows if r["budget"] == label}
        if len(by_turns) >= 2 and by_turns[min(by_turns)] > 0:
            out[label] = round(by_turns[max(by_turns)] / by_turns[min(by_turns)], 2)
    return out


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    before = {(r["turns"], r["budget"]): r for r in (result.get("before") or {}).get("rows", [])}
    lines = ["# Rewrite cost (`core.rewrite` alone)", "",
             f"{m['cores']} cores, {m['cpu_model']}, Python {m['python']}; o200k_base; "
             f"median of {result['runs']} warm runs"
             + (", one decoded history per case reused" if result.get("same_objects") else "")
             + ("; the history's costs carried from the previous request (gateway/pipeline/"
                "history_costs.py), the lookup timed" if result.get("costs_carried")
                else "; every history message counted in the rewrite")
             + f"; commit {result.get('commit') or '?'}"
             + (f", before: {result['before'].get('commit') or '?'}" if before else "") + ".",
             ""]
    head = "| turns | budget | median ms | p90 ms | cold ms | tokens original | forwarded |"
    rule = "|---:|---|---:|---:|---:|---:|---:|"
    if before:
        head += " before median ms | before cold ms | speed-up |"
        rule += "---:|---:|---:|"
    lines += [head, rule]
    for r in result["rows"]:
        line = (f"| {r['turns']} | {r['budget']} | {r['median_ms']} | {r['p90_ms']} | "
                f"{r['cold_ms']} | {r['tokens_original']} | {r['tokens_forwarded']} |")
        if (b := before.get((r["turns"], r["budget"]))) is not None:
            line += (f" {b['median_ms']} | {b['cold_ms']} | "
                     f"{b['median_ms'] / r['median_ms']:.1f}× |")
        lines.append(line)
    ratio = ", ".join(f"budget {k}: {v}×" for k, v in result["ratios"].items())
    if before:
        ratio += " — before: " + ", ".join(f"budget {k}: {v}×"
                                            for k, v in result["before"]["ratios"].items())
    lines += ["", f"300 turns over 50 turns (median): {ratio}.", "",
              ("Target: within 1.5× at the 2,000 and 8,000 budgets. The `fits` row forwards "
               "the whole history, so its output (and cost) grows with the conversation. "
               "Inputs and method: the docstring of bench/rewrite_cost.py."), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/rewrite-cost.json"))
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--turns", type=int, nargs="+", default=list(TURNS))
    parser.add_argument("--commit", default=None, help="the commit measured, for the record")
    parser.add_argument("--same-objects", action="store_true",
                        help="reuse one decoded history per case (see the docstring)")
    parser.add_argument("--recount", action="store_true",
                        help="the rewrite counts every history message (no costs carried)")
    parser.add_argument("--before", type=Path, default=None,
                        help="an earlier result of this benchmark, shown side by side")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    rows = measure([(turns, label, budget) for turns in args.turns for label, budget in BUDGETS],
                   args.runs, args.same_objects, args.recount)
    result: dict[str, Any] = {"benchmark": "rewrite_cost", "machine": machine(),
                              "runs": args.runs, "commit": args.commit,
                              "same_objects": args.same_objects,
                              "costs_carried": not args.recount, "rows": rows,
                              "ratios": ratios(rows)}
    if args.before is not None:
        result["before"] = json.loads(args.before.read_text())
    write_result(args.out, result, markdown(result), ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
