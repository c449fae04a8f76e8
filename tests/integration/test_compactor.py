"""The compactor against a real store (embedded Valkey) with the hashing test embedder:
chunks cover every turn beyond the recent window exactly once, in order, dated, embedded;
runs are idempotent; old chunks merge beyond the cap; a fork drops chunks off the branch."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pytest

from gateway.core.memory.compaction import CompactionPolicy, recent_window_start, render_chunk
from gateway.core.ids import ConversationKey
from gateway.core.messages import Message, StoredMessage, chain
from gateway.errors import UpstreamError
from gateway.memory.records.chunk_store import ChunkStore, vector_id
from gateway.memory.jobs.compactor import Compactor
from gateway.memory.embedders.hashing import HashEmbedder
from gateway.memory.records.vector_store import space_of
from gateway.memory.records.keys import MemoryKeySpace
from gateway.memory.jobs.summarizer import LlmSummarizer, Summarizer
from gateway.ports import UpstreamCall
from gateway.tokenizer import tokenizer_for_model

KEY = ConversationKey("acme", "u1", "c1")
TOKENIZER = tokenizer_for_model("gpt-4o-mini")
EMBEDDER = HashEmbedder()
SPACE = space_of(EMBEDDER)
POLICY = CompactionPolicy(min_rounds=5, min_tokens=1200, recent_window_turns=4,
                          chunk_max_tokens=120)
TOPICS = ["Berlin flat hunting", "the pottery class", "Anna's birthday party",
          "the tax return", "marathon training"]


async def embed(texts: Sequence[str]) -> np.ndarray:
    return EMBEDDER.embed(texts)


def turn(i: int) -> list[Message]:
    """Round i of a long conversation: a dated session marker every 10 rounds."""
    topic = TOPICS[(i // 8) % len(TOPICS)]
    marker = f"[{i // 10 + 1} May, 2023] " if i % 10 == 0 else ""
    return [Message.of("user", f"{marker}Round {i}: about {topic}, I paid ${100 + i} "
                               f"and meet Dana at {i % 12 + 1} pm."),
            Message.of("assistant", f"Noted for round {i}: {topic}. Anything else?")]


def conversation(rounds: int, start: int = 0) -> tuple[StoredMessage, ...]:
    messages = [m for i in range(start, start + rounds) for m in turn(i)]
    return chain(None, messages, created_at=1_700_000_000.0)


def compactor(redis, *, summarizer: Summarizer | None = None, policy=POLICY,
              threshold: float = 0.1, **kwargs) -> Compactor:
    return Compactor(ChunkStore(redis, space=SPACE), summarizer or Summarizer(TOKENIZER), embed, TOKENIZER,
                     policy, related_threshold=threshold, clock=lambda: 1_800_000_000.0,
                     **kwargs)


def assert_exact_cover(chunks, transcript, policy=POLICY, *, complete: bool = True) -> None:
    """Chunks cover transcript positions 0.. contiguously, once, in order, with its ids."""
    position = 0
    for chunk in chunks:
        assert chunk.first_position == position
        assert chunk.source_ids == tuple(
            m.id for m in transcript[chunk.first_position:chunk.last_position + 1])
        position = chunk.last_position + 1
    window = recent_window_start([m.message.role for m in transcript], policy.recent_window_turns)
    assert position <= window
    if complete:  # what is left beyond the window is below the threshold
        assert [m.message.role for m in transcript[position:window]].count("user") \
            < policy.min_rounds


async def test_a_40_round_conversation_is_covered_once_in_order_with_dates(redis_client):
    full = conversation(40)
    worker = compactor(redis_client)
    for rounds in range(1, 41):  # the worker runs after every turn
        await worker.process(KEY, full[:2 * rounds])
    chunks = await ChunkStore(redis_client, space=SPACE).list(KEY)
    assert len(chunks) == 7  # (40 - 4 window) rounds // 5
    assert_exact_cover(chunks, full)
    assert [c.start_date for c in chunks[:3]] == ["2023-05-01", "2023-05-01", "2023-05-02"]
    assert all(c.start_date <= c.end_date for c in chunks)
    assert render_chunk(chunks[0]).startswith("[2023-05-01] User: ")
    assert all(c.method == "extractive" and 0 < c.tokens <= POLICY.chunk_max_tokens
               for c in chunks)
    assert "$100" in chunks[0].text and "Dana" in chunks[0].text
    vectors = await redis_client.hgetall(MemoryKeySpace().conversation(KEY).vectors)
    assert set(vectors) == {vector_id(c.id) for c in chunks}


async def test_a_backlog_becomes_the_same_chunks_in_one_run(redis_client):
    full = conversation(40)
    result = await compactor(redis_client).process(KEY, full)
    assert result.created == 7 and not result.pending
    assert_exact_cover(result.chunks, full)
    assert result.chunks == await ChunkStore(redis_client, space=SPACE).list(KEY)


async def test_a_run_makes_at_most_max_new_chunks_and_says_more_are_pending(redis_client):
    full = conversation(40)
    first = await compactor(redis_client, max_new_chunks=3).process(KEY, full)
    assert (first.created, first.pending) == (3, True)
    second = await compactor(redis_client, max_new_chunks=10).process(KEY, full)
    assert (second.created, second.pending) == (4, False)
    assert_exact_cover(second.chunks, full)


async def test_running_twice_on_the_same_transcript_writes_nothing(redis_client):
    full = conversation(20)
    version_key = MemoryKeySpace().conversation(KEY).version
    first = await compactor(redis_client).process(KEY, full)
    version = await redis_client.get(version_key)
    again = await compactor(redis_client).process(KEY, full)
    assert again.created == 0 and again.chunks == first.chunks
    assert await redis_client.get(version_key) == version
    # A chunk made meanwhile by someone else is refused by the store, not duplicated.
    assert not await ChunkStore(redis_client, space=SPACE).append(KEY, first.chunks[-1], None)


async def test_chunks_beyond_the_cap_merge_oldest_first(redis_client):
    policy = CompactionPolicy(min_rounds=2, recent_window_turns=4, max_chunks=3,
                              chunk_max_tokens=80)
    full = conversation(40)
    worker = compactor(redis_client, policy=policy)
    for rounds in range(1, 41):
        await worker.process(KEY, full[:2 * rounds])
    chunks = await ChunkStore(redis_client, space=SPACE).list(KEY)
    assert len(chunks) == 3
    assert_exact_cover(chunks, full, policy)
    assert chunks[0].method == "merged" and chunks[0].start_date == "2023-05-01"
    assert all(c.tokens <= 80 for c in chunks)
    vectors = await redis_client.hgetall(MemoryKeySpace().conversation(KEY).vectors)
    assert set(vectors) == {vector_id(c.id) for c in chunks}  # merged-away vectors are gone


async def test_a_fork_drops_chunks_off_the_branch_and_summarises_the_new_one(redis_client):
    original = conversation(20)
    first = await compactor(redis_client).process(KEY, original)
    assert [(c.first_position, c.last_position) for c in first.chunks] == \
        [(0, 9), (10, 19), (20, 29)]
    # The client edits round 7: the branch diverges at position 14, inside the second chunk.
    edited = chain(None, [m.message for m in original[:14]]
                   + [Message.of("user", "Actually, let us talk about Lisbon in June 2023.")]
                   + [turn(7)[1]] + [m for i in range(8, 20) for m in turn(i)])
    result = await compactor(redis_client).process(KEY, edited)
    assert (result.removed, result.created) == (2, 2)
    assert result.chunks[0] == first.chunks[0]
    assert_exact_cover(result.chunks, edited)
    assert "Lisbon" in result.chunks[1].text
    vectors = await redis_client.hgetall(MemoryKeySpace().conversation(KEY).vectors)
    assert set(vectors) == {vector_id(c.id) for c in result.chunks}


async def test_no_personal_identifier_reaches_a_chunk(redis_client):
    messages = [Message.of("user", "My phone is 13812345678 and my email is li.na@example.com; "
                                   "I live in Chengdu since 2019."),
                Message.of("assistant", "Noted, Chengdu since 2019.")]
    full = chain(None, messages + [m for i in range(1, 9) for m in turn(i)])
    result = await compactor(redis_client).process(KEY, full)
    text = result.chunks[0].text
    assert "Chengdu" in text
    assert "13812345678" not in text and "li.na@example.com" not in text


class CannedUpstream:
    def __init__(self, answer: dict | Exception):
        self.answer = answer
        self.calls: list[UpstreamCall] = []

    async def complete(self, call: UpstreamCall) -> dict:
        self.calls.append(call)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def llm_summarizer(upstream) -> Summarizer:
    return Summarizer(TOKENIZER, LlmSummarizer(upstream, "openai/summary-model"))


async def test_llm_summaries_see_the_previous_chunk_and_redacted_text(redis_client):
    upstream = CannedUpstream({"choices": [{"message": {"role": "assistant",
                                                        "content": "A canned summary."},
                                            "finish_reason": "stop"}]})
    full = conversation(14)
    full = chain(None, [Message.of("user", "Call me at +44 20 7946 0958, please.")]
                 + [m.message for m in full])
    result = await compactor(redis_client, summarizer=llm_summarizer(upstream)).process(KEY,
                                                                                        full)
    assert [c.method for c in result.chunks] == ["llm", "llm"]
    assert result.chunks[0].text == "A canned summary."
    first_prompt = upstream.calls[0].body["messages"][1]["content"]
    assert "7946" not in first_prompt and "Call me at" in first_prompt
    assert "<previous_summary>\nA canned summary." in upstream.calls[1].body["messages"][1][
        "content"]


async def test_a_failing_llm_still_gives_a_chunk_covering_the_span(redis_client):
    upstream = CannedUpstream(UpstreamError("down", status=503))
    full = conversation(12)
    result = await compactor(redis_client, summarizer=llm_summarizer(upstream)).process(KEY,
                                                                                        full)
    assert [c.method for c in result.chunks] == ["extractive"]
    assert_exact_cover(result.chunks, full)
    assert "Round 0" in result.chunks[0].text


def talk(pairs: list[tuple[str, str]]) -> tuple[StoredMessage, ...]:
    return chain(None, [Message.of(role, text) for pair in pairs
                        for role, text in zip(("user", "assistant"), pair)])


GARDEN = [("How deep should I plant tulip bulbs in my garden?", "Plant tulip bulbs 15 cm deep."),
          ("When should I plant tulip bulbs in the garden?", "Plant tulip bulbs in autumn."),
          ("Do tulip bulbs in the garden need much water?", "Tulip bulbs need little water."),
          ("Should I fertilise tulip bulbs in my garden?", "Fertilise tulip bulbs in spring."),
          ("Can squirrels dig up tulip bulbs in my garden?", "Squirrels dig up tulip bulbs."),
          ("Do tulip bulbs in the garden come back yearly?", "Tulip bulbs come back yearly.")]


@pytest.mark.parametrize("newest, shift", [
    (("Explain quantum entanglement for my physics exam tomorrow.", "Sure."), True),
    (("Are tulip bulbs in my garden poisonous to cats?", "Tulip bulbs are toxic to cats."),
     False),
])
async def test_a_topic_shift_summarises_two_waiting_rounds_early(redis_client, newest, shift):
    transcript = talk(GARDEN[:5] + [newest])  # 2 rounds beyond the 4-turn window
    result = await compactor(redis_client, threshold=0.3).process(KEY, transcript)
    assert result.topic_shift is shift
    assert [(c.first_position, c.last_position) for c in result.chunks] == \
        ([(0, 3)] if shift else [])


async def test_a_deleted_chunk_stays_deleted(redis_client):
    full = conversation(12)
    store = ChunkStore(redis_client, space=SPACE)
    (chunk,) = (await compactor(redis_client).process(KEY, full)).chunks
    assert await store.delete(KEY, chunk.id)
    assert not await store.delete(KEY, "no-such-chunk")
    (tombstone,) = await store.list(KEY)
    assert tombstone.deleted and render_chunk(tombstone) == ""
    assert await store.vectors(KEY, [chunk.id]) == (None,)
    again = await compactor(redis_client).process(KEY, full)
    assert again.created == 0 and again.chunks == (tombstone,)
