"""What the memory worker derives per message is kept by message id (gateway/memory/
message_memo.py): a topic walk after one more turn redacts and embeds only the new messages,
and decides exactly as a walk that derives everything again."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pytest

from gateway.core.memory.compaction import message_dates
from gateway.core.ids import ConversationKey
from gateway.core.messages import Message, chain
from gateway.core.text.pii import redact
from gateway.core.memory.topics import TopicPolicy
from gateway.memory.embedders.hashing import HashEmbedder
from gateway.memory.search.embedding import EmbeddingService
from gateway.memory.jobs.message_memo import MessageMemo
from gateway.memory.records.topic_store import TopicStore
from gateway.memory.jobs.topic_tracker import TopicTracker

POLICY = TopicPolicy(window_turns=4, min_turns=2, label_words=3)
TOPICS = ["sourdough starter feeding flour hydration", "marathon training tempo intervals",
          "tax return deductions receipts accountant"]


class CountingEmbedder(HashEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.texts += texts
        return super().embed(texts)


def transcript(rounds: int):
    messages = []
    for i in range(rounds):
        topic = TOPICS[(i // 5) % len(TOPICS)]
        phone = f", call +49 151 2345 67{i % 10}{i % 7}" if i % 3 == 0 else ""
        messages += [Message.of("user", f"{topic}{phone}"),
                     Message.of("assistant", f"{topic} noted")]
    return chain(None, messages, created_at=1_700_000_000.0)


def tracker(redis, embedder: HashEmbedder, memo: MessageMemo, redactions: list[str]):
    def counting_redact(text: str) -> str:
        redactions.append(text)
        return redact(text)
    return TopicTracker(TopicStore(redis), EmbeddingService(embedder), POLICY, threshold=0.2,
                        redact=counting_redact, memo=memo)


async def test_a_walk_per_turn_derives_each_message_once_and_decides_as_without_a_memo(
        redis_client):
    full = transcript(15)
    kept, fresh = CountingEmbedder(), CountingEmbedder()
    kept_redactions: list[str] = []
    with_memo = tracker(redis_client, kept, MessageMemo(), kept_redactions)
    # max_values=1: every walk derives (nearly) everything again, as before the memo.
    without = tracker(redis_client, fresh, MessageMemo(max_values=1), [])
    for rounds in range(1, 16):
        a = await with_memo.process(ConversationKey("t", "u", "memo"), full[:2 * rounds])
        b = await without.process(ConversationKey("t", "u", "plain"), full[:2 * rounds])
        assert a == b
    assert len(a.segments) == 3  # the test means something: topics did switch
    # Each message was embedded and redacted once; without the memo, windows again and again.
    assert len(kept.texts) <= len(full) and len(kept_redactions) <= len(full)
    assert len(fresh.texts) > 2 * len(kept.texts)


def test_the_memo_keeps_the_most_recently_used_values_within_its_bound():
    memo = MessageMemo(max_values=2)
    memo.put("redacted", "a", "A")
    memo.put("redacted", "b", "B")
    assert memo.get("redacted", "a") == "A"  # a is now the most recent
    memo.put("redacted", "c", "C")
    assert memo.get("redacted", "b") is None and memo.get("redacted", "a") == "A"
    assert memo.derive("words", "a", lambda: ["x"]) == ["x"] and len(memo) == 2
    with pytest.raises(ValueError):
        MessageMemo(max_values=0)


async def test_compaction_dates_from_the_memo_equal_the_dates_read_off_every_text(redis_client):
    from tests.integration.test_compactor import compactor, conversation
    full = conversation(30)
    worker = compactor(redis_client, memo=MessageMemo())
    first = worker._dates(full)
    assert first == worker._dates(full) == message_dates([m.message.text for m in full])
    assert any(first)


async def test_a_walk_over_a_transcript_that_starts_with_assistant_messages_decides(
        redis_client):
    # The window of the first user message reaches back to the messages before it: they are
    # embedded too (once a KeyError that failed the conversation's memory run).
    messages = [Message.of("assistant", f"{TOPICS[0]} welcome"),  # in the first window
                Message.of("user", "hi"), Message.of("user", "ok"),  # turns, too short to test
                Message.of("user", TOPICS[1]), Message.of("assistant", f"{TOPICS[1]} noted")]
    full = chain(None, messages, created_at=1_700_000_000.0)
    state = await tracker(redis_client, HashEmbedder(), MessageMemo(), []).process(
        ConversationKey("t", "u", "starts-with-assistant"), full)
    assert state.through == len(full) and state.segments
