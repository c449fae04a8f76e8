"""Request-path recall latency at 100, 1k and 10k stored turns per conversation.

`python -m bench.recall_latency --out bench/results/recall-latency.json` (also writes a
markdown table beside it). Real parts only: the USE embedder, an embedded Valkey started in a
temporary directory, FAISS and BM25 indexes, the Recaller. Synthetic conversations mix
English sentences and Chinese sentences (~1 in 4) built from templates with a seeded RNG.

Measured per size:
- `index_turns_per_s`: TurnIndexer.sync of the whole conversation (redact, date, embed, store);
- `cold_ms`: the first recall in a fresh process state (both caches built from the store);
- `warm_ms` p50/p99 over the queries: a recall with built caches (GET version, embed the
  query, dense + BM25 search, fusion, fetch entries) — the steady state between turns;
- `after_turn_ms` p50/p99: the first recall after one new turn was indexed (caches refreshed
  incrementally: new vectors appended, BM25 matrix rebuilt) — what the first request after
  each turn pays;
- `embed_query_ms` p50: the query embedding alone;
- `user_p50_ms` / `user_p99_ms`: a warm recall for the same (identified) user once four
  earlier conversations of theirs, as many turns in all as the current one, are in the user's
  recall index (gateway/memory/jobs/user_index.py): the conversation and the user namespace are
  both searched.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

from bench.output import write_result
from bench.overhead.processes import stop_children_on_sigterm
from gateway.config.context import ContextConfig
from gateway.config.memory import TenantMemoryConfig
from gateway.core.ids import ConversationKey
from gateway.core.messages import Message, chain
from gateway.memory.embedders import build_embedder
from gateway.memory.search.embedding import EmbeddingService
from gateway.memory.records.keys import MemoryKeySpace
from gateway.memory.search.lexical_index import Bm25LexicalIndex
from gateway.memory.recall.recaller import Recaller
from gateway.memory.recall.service import RecallSettings
from gateway.memory.jobs.turn_index import TurnIndexer
from gateway.memory.jobs.user_index import UserRecallIndex
from gateway.memory.search.vector_index import FaissVectorIndex
from gateway.store import EmbeddedRedis, connect

SIZES = (100, 1_000, 10_000)
_PEOPLE = ["Caroline", "Melanie", "my brother", "our neighbour", "the new manager", "Grandma"]
_PLACES = ["the harbour", "Lisbon", "the climbing gym", "a tiny bakery", "the museum", "Kyoto"]
_THINGS = ["a vintage camera", "sourdough bread", "a charity run", "pottery classes",
           "a jazz concert", "the garden shed", "a used bicycle", "a book about whales"]
_EN = ["{p} told me about {t} at {l}.", "Yesterday {p} and I went to {l} for {t}.",
       "I keep thinking about {t}; {p} says it was worth it.",
       "Do you remember when {p} brought {t} to {l}?",
       "Next month I want to try {t} near {l}.", "{p} finally fixed {t} after {n} weeks."]
_ZH_PEOPLE = ["小王", "我妈妈", "同事李娜", "邻居", "老张"]
_ZH_THINGS = ["学做蛋糕", "跑马拉松", "买了一台相机", "去爬山", "学弹钢琴", "修自行车"]
_ZH_PLACES = ["杭州", "公司楼下", "西湖边", "健身房", "老家"]
_ZH = ["{p}上周在{l}{t}。", "我和{p}打算下个月去{l}{t}。", "{p}说在{l}{t}很有意思。",
       "你还记得{p}在{l}{t}的那次吗？"]


def sentence(rng: random.Random) -> str:
    if rng.random() < 0.25:
        return rng.choice(_ZH).format(p=rng.choice(_ZH_PEOPLE), l=rng.choice(_ZH_PLACES),
                                      t=rng.choice(_ZH_THINGS))
    return rng.choice(_EN).format(p=rng.choice(_PEOPLE), l=rng.choice(_PLACES),
                                  t=rng.choice(_THINGS), n=rng.randint(2, 30))


def turns(n: int, rng: random.Random) -> list[Message]:
    out = []
    for i in range(n):
        text = sentence(rng)
        if i % 200 == 0:  # a session marker now and then, as transcripts carry them
            text = f"[{rng.randint(1, 28)} May, 2023] {text}"
        out.append(Message.of("user" if i % 2 == 0 else "assistant", text))
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


async def measure(url: str, size: int, queries: int, rng: random.Random,
                  embedding: EmbeddingService, settings: RecallSettings) -> dict[str, Any]:
    redis = connect(url)
    keys = MemoryKeySpace()
    key = ConversationKey("bench", "user", f"conv-{size}")
    try:
        transcript = chain(None, turns(size, rng))
        indexer = TurnIndexer(redis, embedding, keys)
        started = time.perf_counter()
        await indexer.sync(key, transcript)
        index_s = time.perf_counter() - started

        vectors = FaissVectorIndex(redis, embedding.dim, keys, space=embedding.space)
        lexical = Bm25LexicalIndex(redis, keys)
        recaller = Recaller(embedding, vectors, lexical, redis, keys)
        recall = functools.partial(recaller.recall, k=settings.top_k,
                                   successors_of=settings.successors_of,
                                   ranker=settings.ranker, chunks=settings.chunks)
        questions = [sentence(rng) for _ in range(queries)]
        started = time.perf_counter()
        await recall(key, questions[0])
        cold_ms = (time.perf_counter() - started) * 1e3

        warm, embed = [], []
        for q in questions:
            started = time.perf_counter()
            recalled = await recall(key, q)
            warm.append((time.perf_counter() - started) * 1e3)
            assert recalled
        for q in questions[:50]:
            started = time.perf_counter()
            await embedding.embed_query_one(q)
            embed.append((time.perf_counter() - started) * 1e3)

        after = []
        for q in questions[:20]:
            new = chain(transcript[-1].id, [Message.of("user", sentence(rng))])
            transcript = transcript + new
            await indexer.sync(key, transcript)
            started = time.perf_counter()
            await recall(key, q)
            after.append((time.perf_counter() - started) * 1e3)
        user = await _with_user_namespace(redis, indexer, keys, key, transcript, size, rng,
                                          recall, questions)
        vectors.close()
        lexical.close()
        return {"turns": size, "queries": queries,
                "index_turns_per_s": round(size / index_s, 1),
                "cold_ms": round(cold_ms, 2),
                "warm_p50_ms": round(statistics.median(warm), 2),
                "warm_p99_ms": round(pct(warm, 99), 2),
                "after_turn_p50_ms": round(statistics.median(after), 2),
                "after_turn_p99_ms": round(pct(after, 99), 2),
                "embed_query_p50_ms": round(statistics.median(embed), 2),
                "user_p50_ms": round(statistics.median(user), 2),
                "user_p99_ms": round(pct(user, 99), 2)}
    finally:
        await redis.aclose()


async def _with_user_namespace(redis: Any, indexer: TurnIndexer, keys: MemoryKeySpace,
                               key: ConversationKey, transcript: list[Any], size: int,
                               rng: random.Random, recall: Callable[..., Awaitable[Any]],
                               questions: list[str]) -> list[float]:
    """Warm recall latencies once the user has 4 earlier conversations of size/4 turns."""
    user_index = UserRecallIndex(redis, keys)
    for n in range(4):
        earlier = ConversationKey(key.tenant, key.user, f"{key.conversation}-earlier-{n}")
        older = chain(None, turns(max(1, size // 4), rng))
        await indexer.sync(earlier, older)
        await user_index.sync(earlier, older)
    await user_index.sync(key, transcript)
    await recall(key, questions[0])  # builds the user namespace's caches
    out = []
    for q in questions:
        started = time.perf_counter()
        recalled = await recall(key, q)
        out.append((time.perf_counter() - started) * 1e3)
        assert recalled
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = ["# Recall latency (request path)", "",
             f"{result['machine']}; embedder `{result['embedder']}`; k={result['k']}, "
             f"successors of {result['successors_of']}; ranking: {result['ranking']}; "
             "embedded Valkey on a unix socket.", "",
             "| turns | index turns/s | cold ms | warm p50 ms | warm p99 ms | after-turn p50 ms "
             "| after-turn p99 ms | embed query p50 ms "
             "| with 4 earlier conversations p50 / p99 ms |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["sizes"]:
        lines.append(f"| {r['turns']} | {r['index_turns_per_s']} | {r['cold_ms']} | "
                     f"{r['warm_p50_ms']} | {r['warm_p99_ms']} | {r['after_turn_p50_ms']} | "
                     f"{r['after_turn_p99_ms']} | {r['embed_query_p50_ms']} | "
                     f"{r['user_p50_ms']} / {r['user_p99_ms']} |")
    lines += ["", "warm: caches built, nothing changed since. after-turn: first recall after "
              "one more turn was indexed (incremental FAISS refresh; a conversation over 500 "
              "turns keeps its BM25 index while a rebuild runs beside it, which still competes "
              "for the CPU). With 4 earlier conversations: the same user has four earlier "
              "conversations with as many turns in all in their recall index, searched beside "
              "the current one.", ""]
    return "\n".join(lines)


async def run(sizes: tuple[int, ...], queries: int, url: str,
              memory: TenantMemoryConfig) -> dict[str, Any]:
    embedder = build_embedder("use")
    settings = RecallSettings.from_config(memory, ContextConfig(), embedder)
    embedding = EmbeddingService(embedder)
    try:
        await embedding.warm_up()
        rng = random.Random(20231)
        rows = [await measure(url, size, queries, rng, embedding, settings) for size in sizes]
    finally:
        embedding.close()
    return {"benchmark": "recall_latency", "embedder": embedder.name, "k": settings.top_k,
            "successors_of": settings.successors_of,
            "ranking": "fusion" if settings.ranker is None else "learned",
            "machine": f"{platform.machine()}, {platform.python_implementation()} "
                       f"{platform.python_version()}",
            "sizes": rows}


def main(argv: list[str] | None = None) -> int:
    stop_children_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/recall-latency.json"))
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--k", type=int, default=TenantMemoryConfig().recall_top_k,
                        help="turns recalled (default: the gateway's recall_top_k)")
    parser.add_argument("--successors-of", choices=("questions", "all"),
                        default=TenantMemoryConfig().recall_successors_of,
                        help="which recalled turns bring the next (default: the gateway's)")
    parser.add_argument("--ranking", choices=("learned", "fusion"), default="learned",
                        help="re-rank the fused candidates with the shipped learned ranking "
                             "(the gateway's default) or not")
    args = parser.parse_args(argv)
    # Only top_k, successors_of, ranker and chunks reach Recaller.recall here (`measure`);
    # the rest of the tenant's recall is the shipped default's and is not read.
    memory = TenantMemoryConfig(recall_top_k=args.k, recall_successors_of=args.successors_of,
                                recall_ranking=args.ranking)
    with tempfile.TemporaryDirectory(prefix="cgrecall-") as tmp:
        server = EmbeddedRedis(Path(tmp))
        server.start()
        try:
            result = asyncio.run(run(tuple(args.sizes), args.queries, server.url, memory))
        finally:
            server.stop()
    write_result(args.out, result, markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
