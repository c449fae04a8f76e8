"""What `core.rewrite` costs per request at 50 and 300 stored turns: is it flat in length?

`python -m bench rewrite-cost [--runs 60] [--before FILE]` prints a table and writes
`bench/results/rewrite-cost.json` and `.md`. Synthetic, seeded inputs shaped like a served
request with memory on: one system prompt, `turns` stored messages of ~60-120 tokens (English,
a Chinese one in four, a date anchor now and then), the current user message; memory holds a
summary chunk per 10 messages (at most 30) covering all but the newest 20 messages, a
profile, and 50 recollections (8 facts, 32 turns of this conversation, 10 chunks), best first.
The policy is the default one with a summary share (0.2 summary, 0.05 profile, 0.5 recall),
counted with o200k_base. Budgets: 2,000 and 8,000 prompt tokens, and `fits` (128,000: the
whole history is forwarded, so that row's output grows with the conversation).

Each run rewrites a request decoded afresh from JSON (new strings, as the request path
decodes the stored transcript), timed alone; the median over `--runs` runs is reported after
warm-up runs, the steady state of a long-running server. `cold ms` is the median of five
first rewrites, each on a newly built tokenizer (nothing counted before, nothing cached).
`--before FILE` adds the figures of an earlier run of this benchmark (the same script run on
an older commit) side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from gateway.core.memory import MemoryContext
from gateway.core.messages import Message
from gateway.core.policy import ContextPolicy
from gateway.core.recall import Recollection
from gateway.core.rewrite import RewriteRequest, rewrite
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
    for i in range(turns):
        text = _text(rng, rng.randint(60, 120), tokenizer)
        if i % 40 == 0:
            text = f"[{1 + i // 40} May, 2023] {text}"
        history.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    ids = [f"m{i:04d}" for i in range(turns)]
    covered = max(0, turns - 20)
    n_chunks = min(30, turns // 10)
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
    for i in sorted(rng.sample(range(turns), min(32, turns))):
        recalled.append({"kind": "turn", "id": ids[i], "text": history[i]["content"],
                         "source_ids": [ids[i]], "position": i})
    for c in rng.sample(range(n_chunks), min(10, n_chunks)):
        recalled.append({"kind": "chunk", "id": f"chunk:{c}", "text": chunks[c]["text"],
                         "source_ids": chunks[c]["ids"], "position": c * 10})
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


def request(data: str, budget: int) -> RewriteRequest:
    """The rewrite request of a scenario, decoded from its JSON text (fresh strings)."""
    s = json.loads(data)
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


def measure(turns: int, label: str, budget: int, runs: int) -> dict[str, Any]:
    tokenizer = tokenizer_for_encoding(O200K)
    data = json.dumps(scenario(turns, seed=turns, tokenizer=TiktokenTokenizer(O200K)),
                      ensure_ascii=False)
    cold = []
    for _ in range(COLD_RUNS):
        fresh, req = TiktokenTokenizer(O200K), request(data, budget)
        started = time.perf_counter()
        rewrite(req, fresh)
        cold.append((time.perf_counter() - started) * 1e3)
    requests = [request(data, budget) for _ in range(runs + 5)]
    for req in requests[:5]:  # warm-up: the server has seen this conversation before
        out = rewrite(req, tokenizer)
    times = []
    for req in requests[5:]:
        started = time.perf_counter()
        rewrite(req, tokenizer)
        times.append((time.perf_counter() - started) * 1e3)
    times.sort()
    return {"turns": turns, "budget": label, "prompt_budget": budget, "runs": runs,
            "median_ms": round(statistics.median(times), 3),
            "p90_ms": round(times[int(0.9 * (len(times) - 1))], 3),
            "cold_ms": round(statistics.median(cold), 3),
            "tokens_original": out.tokens_original, "tokens_forwarded": out.tokens_forwarded,
            "messages_forwarded": len(out.messages), "recalled": out.recalled,
            "summary_chunks": out.summary_chunks}


def machine() -> dict[str, Any]:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f
                        if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cores": os.cpu_count(), "cpu_model": cpu,
            "python": f"{platform.python_implementation()} {platform.python_version()}",
            "platform": platform.platform()}


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
             f"{m['cores']} cores, {m['cpu_model']}, {m['python']}; o200k_base; "
             f"median of {result['runs']} warm runs; commit {result.get('commit') or '?'}"
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
    lines += ["", "300 turns over 50 turns (median): " + ", ".join(
        f"budget {k}: {v}×" for k, v in result["ratios"].items())
        + (" — before: " + ", ".join(f"budget {k}: {v}×"
                                      for k, v in result["before"]["ratios"].items())
           if before else "") + ".", "",
        "Target: within 1.5× at the 2,000 and 8,000 budgets. The `fits` row forwards the "
        "whole history, so its output (and cost) grows with the conversation. Inputs and method: "
        "the docstring of bench/rewrite_cost.py.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/rewrite-cost.json"))
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--turns", type=int, nargs="+", default=list(TURNS))
    parser.add_argument("--commit", default=None, help="the commit measured, for the record")
    parser.add_argument("--before", type=Path, default=None,
                        help="an earlier result of this benchmark, shown side by side")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    rows = [measure(turns, label, budget, args.runs)
            for turns in args.turns for label, budget in BUDGETS]
    result: dict[str, Any] = {"benchmark": "rewrite_cost", "machine": machine(),
                              "runs": args.runs, "commit": args.commit, "rows": rows,
                              "ratios": ratios(rows)}
    if args.before is not None:
        result["before"] = json.loads(args.before.read_text())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
