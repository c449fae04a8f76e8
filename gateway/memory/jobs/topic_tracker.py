"""Topic tracking (run by the memory worker): walks a conversation's new user messages, decides
for each whether it opens a new topic, labels the topics, and stores the state.

`TopicTracker.process(key, transcript)` resumes where the last walk stopped (the stored
`through` marker; a fork that removed it restarts the walk from the branch's start). Each new
user message with enough words to judge, in a segment old enough to end
(`TopicPolicy.min_turns`), is compared with the segment's latest `window_turns` messages: the
LLM classifier when one is configured, else — or when it gives no answer — embedding drift
(`core.topics.is_switch` at the embedder's topic-shift threshold, the one compaction used
before topics existed). All the texts a walk needs are embedded in one batch, each on its own
(not in its context, as the turn index embeds them: the previous turn's words would pull a
new topic back towards the old one).

Invariants: only redacted text is embedded, sent to the classifier or used for labels, never
a one-shot placeholder's (it is no content: `core.memory.content`); the
state is written once per walk, in one transaction, while the worker holds the
conversation's lock; walking the same transcript again writes nothing new (idempotent).
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

import numpy as np

from gateway.core.ids import ConversationKey
from gateway.core.memory.content import has_content
from gateway.core.text.lexical import tokens
from gateway.core.messages import StoredMessage
from gateway.core.text.pii import redact as redact_pii
from gateway.core.memory.topics import (
    TopicPolicy, TopicSegment, counted_turn, is_switch, label_of_tokens, labelled, may_switch,
    on_branch, started, switched)
from gateway.memory.search.embedding import EmbeddingService
from gateway.memory.jobs.message_memo import MessageMemo
from gateway.memory.jobs.topic_classifier import LlmTopicClassifier
from gateway.memory.records.topic_store import TopicState, TopicStore
from gateway.memory.records.writes import Writes

log = logging.getLogger("gateway.memory.topics")

MIN_WORDS = 3
"""A message with fewer content words ("ok, sure!", "haha yes") says nothing about its topic:
it stays on the current one."""
LABEL_MESSAGES = 60
"""A label is made from at most the segment's latest this many messages..."""
BACKGROUND_MESSAGES = 200
"""...against at most this many of the conversation's other messages (its rarity weights)."""


class TopicTracker:
    name = "topics"

    def __init__(self, store: TopicStore, embedding: EmbeddingService, policy: TopicPolicy, *,
                 threshold: float, classifier: LlmTopicClassifier | None = None,
                 redact: Callable[[str], str] = redact_pii,
                 memo: MessageMemo | None = None) -> None:
        """`memo`: what is derived per message (redacted text, its words, its vector), kept
        across walks — shared with other processors only if they redact with `redact` too."""
        self.store = store
        self.memo = memo if memo is not None else MessageMemo()
        self.embedding = embedding
        self.policy = policy
        self.threshold = threshold
        self.classifier = classifier
        self.redact = redact

    async def process(self, key: ConversationKey, transcript: Sequence[StoredMessage], *,
                      writes: Writes | None = None) -> TopicState:
        """Bring the topic state of `key` up to date with `transcript` (its active branch,
        oldest first); the state after it. `writes`: whose transaction stores it (the memory
        job's fence; default: the store's direct one)."""
        state = await self.store.load(key)
        ids = [m.id for m in transcript]
        segments = on_branch(state.segments, ids)
        through = state.through
        if segments != state.segments or not _still_there(state, ids):
            segments, through = (), 0  # a fork: walk the branch again from its start
        if not transcript or through == len(transcript) and segments:
            return state
        if not segments:
            segments = started(transcript[0].id)
        texts = _Redacted(transcript, self.redact, self.memo)
        walked_from = through
        segments = await self._walk(segments, transcript, texts, through)
        segments = self._labelled(segments, texts, walked_from)
        new = TopicState(segments, len(transcript), transcript[-1].id)
        await self.store.save(key, new, writes=writes)
        if len(new.segments) > len(state.segments) and state.segments:
            log.info("topics: %s moved to topic %d at position %d (%s)", key,
                     new.segments[-1].index, new.segments[-1].start, new.segments[-1].method)
        return new

    async def _walk(self, segments: tuple[TopicSegment, ...],
                    transcript: Sequence[StoredMessage], texts: _Redacted,
                    start: int) -> tuple[TopicSegment, ...]:
        users = [p for p in range(start, len(transcript))
                 if transcript[p].message.role == "user" and texts.has(p)]
        vectors = await self._vectors(texts, segments[-1].start, start, users)
        for p in users:
            if not may_switch(segments, self.policy) or len(texts.words(p)) < MIN_WORDS:
                segments = counted_turn(segments)
                continue
            window = self._window(texts, segments[-1].start, p)
            decided = None
            if self.classifier is not None and window:
                decided = await self.classifier.new_topic(
                    segments[-1].label or label_of_tokens([texts.words(i) for i in window],
                                                          self.policy.label_words),
                    [texts[i] for i in window], texts[p])
            method = "llm" if decided is not None else "embedding"
            if decided is None:
                similarities = [float(vectors[i] @ vectors[p]) for i in window]
                decided = is_switch(similarities, self.threshold)
            if decided:
                segments = switched(segments, p, transcript[p].id, method, self.policy)
            else:
                segments = counted_turn(segments)
        return segments

    async def _vectors(self, texts: _Redacted, segment_start: int, start: int,
                       users: list[int]) -> dict[int, np.ndarray]:
        """The vectors a walk may compare, by position: the new user messages, every message
        after them, and the current segment's last window before the walk — those not
        embedded by an earlier walk (the memo's) in one batch."""
        if not users:
            return {}
        earlier = self._window(texts, segment_start, start)
        # From `start`, not from the first user message: a window may reach back to the
        # assistant or system messages before it (a transcript that starts with one).
        wanted = earlier + [p for p in range(start, len(texts)) if texts.has(p)]
        vectors: dict[int, np.ndarray] = {}
        for p in wanted:
            known = self.memo.get("topic_vector", texts.id(p))
            if known is not None:
                vectors[p] = known  # type: ignore[assignment]
        missing = [p for p in wanted if p not in vectors]
        matrix = await self.embedding.embed([texts[p] for p in missing])
        for p, v in zip(missing, matrix):
            vectors[p] = np.asarray(v, dtype=np.float32)
            self.memo.put("topic_vector", texts.id(p), vectors[p])
        return vectors

    def _window(self, texts: _Redacted, segment_start: int, position: int) -> list[int]:
        """Positions of the segment's latest `window_turns` messages with text before
        `position`, oldest first."""
        found = [p for p in range(position - 1, segment_start - 1, -1) if texts.has(p)]
        return sorted(found[:self.policy.window_turns])

    def _labelled(self, segments: tuple[TopicSegment, ...], texts: _Redacted,
                  walked_from: int) -> tuple[TopicSegment, ...]:
        """Segments that gained messages in this walk, and the one before the current one,
        labelled again from their messages. The finished topic's label is refined while the
        next one grows (what its words are rare against is the rest of the conversation,
        little of which existed when it ended); older topics keep theirs."""
        for i, segment in enumerate(segments):
            end = len(texts) - 1 if segment.end is None else segment.end
            if end < walked_from and i != len(segments) - 2:
                continue
            inside = [p for p in range(segment.start, end + 1) if texts.has(p)][-LABEL_MESSAGES:]
            # Background words only weigh rarity and never become a label: not redacted.
            outside = [p for p in (*range(segment.start), *range(end + 1, len(texts)))
                       if texts.has(p)][-BACKGROUND_MESSAGES:]
            label = label_of_tokens([texts.words(p) for p in inside], self.policy.label_words,
                                    background=[texts.raw_words(p) for p in outside])
            if label != segment.label:
                segments = labelled(segments, i, label)
        return segments


def _still_there(state: TopicState, ids: Sequence[str]) -> bool:
    """Whether the walked prefix is still the branch's (its last id where it was)."""
    if state.through == 0:
        return True
    return state.through <= len(ids) and ids[state.through - 1] == state.through_id


class _Redacted:
    """The transcript's texts by position, redacted (and tokenised) when first read — by this
    walk or, through the memo, an earlier one: a walk reads the new messages and the current
    topic's, not the whole conversation. Instructions, blank messages and one-shot placeholders
    have no text ("")."""

    def __init__(self, transcript: Sequence[StoredMessage], redact: Callable[[str], str],
                 memo: MessageMemo):
        self._raw = [m.message.text if has_content(m.message) else "" for m in transcript]
        self._ids = [m.id for m in transcript]
        self._redact = redact
        self._memo = memo

    def __len__(self) -> int:
        return len(self._raw)

    def has(self, position: int) -> bool:
        return bool(self._raw[position])

    def raw(self, position: int) -> str:
        return self._raw[position]

    def id(self, position: int) -> str:
        return self._ids[position]

    def __getitem__(self, position: int) -> str:
        raw = self._raw[position]
        if not raw:
            return ""
        return self._memo.derive("redacted", self._ids[position], lambda: self._redact(raw))

    def words(self, position: int) -> list[str]:
        """The lexical tokens of the redacted text (what labels are made of)."""
        return self._memo.derive("redacted_words", self._ids[position],
                                 lambda: tokens(self[position]))

    def raw_words(self, position: int) -> frozenset[str]:
        """The lexical tokens of the text as written (a label's background)."""
        return self._memo.derive("raw_words", self._ids[position],
                                 lambda: frozenset(tokens(self._raw[position])))
