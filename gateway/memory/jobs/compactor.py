"""Compaction: older turns of a conversation become summary chunks (run by the memory worker).

After new turns were applied, `Compactor.process(key, transcript)` brings the conversation's
chunks up to date with its active branch:

1. chunks no longer on the branch (a client edited or regenerated a turn they cover) are
   removed, with their vectors; their turns are summarised again from the branch;
2. while `core.compaction.plan_compaction` names a span — enough rounds or tokens beyond the
   recent window, or earlier on a topic shift — the span's messages are redacted, summarised
   (LLM, else extractive), dated, embedded and appended as one chunk;
3. while there are more than `max_chunks` chunks, the oldest two are merged (extractively).

Invariants (tests/integration/test_compactor.py): chunks cover the branch's turns beyond the recent
window
exactly once, in order; a second run on the same transcript writes nothing (idempotent: spans
follow from the stored chunks, and the store refuses a chunk whose span is already covered);
no text enters a chunk unredacted; no one-shot placeholder enters a chunk, nor a tool result
unless the tenant makes tool results user memory (chunks are mirrored into the user's recall
index: docs/memory.md, "Tool output is not user memory"). The worker holds the conversation's
lock; should another writer still interfere, `CompactionConflict` is raised and the worker
retries later.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import Awaitable, Callable, Sequence

import numpy as np

from gateway.core.memory.compaction import (
    CompactionPolicy, Span, SummaryChunk, chunk_id, chunks_on_branch, covered_until,
    dates_of, is_topic_shift, merged_chunk, plan_compaction, plan_merge,
    recent_window_start, span_dates)
from gateway.core.memory.content import has_content, is_tool_result
from gateway.core.text.dates import carried, opening_date
from gateway.core.memory.extractive import Utterance, utterances_from_summary
from gateway.core.ids import ConversationKey
from gateway.core.messages import StoredMessage
from gateway.core.text.pii import redact as redact_pii
from gateway.core.text.tokens import Tokenizer, count_message
from gateway.memory.records.chunk_store import ChunkStore
from gateway.memory.jobs.message_memo import MessageMemo
from gateway.memory.jobs.summarizer import Summarizer
from gateway.memory.records.writes import Writes

log = logging.getLogger("gateway.memory")

Embed = Callable[[Sequence[str]], Awaitable[np.ndarray]]
MIN_TOPIC_TOKENS = 4
"""A newer message shorter than this ("ok", "yes, do it") says nothing about its topic."""


class CompactionConflict(Exception):
    """The stored chunks changed while this run was writing; nothing of it was lost, the
    worker runs it again."""


@dataclass(frozen=True, slots=True)
class CompactionResult:
    chunks: tuple[SummaryChunk, ...]
    """The conversation's chunks after this run, oldest first."""
    created: int = 0
    merged: int = 0
    removed: int = 0
    """Chunks dropped because they were no longer on the active branch."""
    topic_shift: bool | None = None
    """Whether the newest message changed the topic; None when that was not needed."""
    pending: bool = False
    """More spans are due than one run makes (`max_new_chunks`); the next run continues."""


class Compactor:
    name = "compaction"

    def __init__(self, chunk_store: ChunkStore, summarizer: Summarizer, embed: Embed,
                 tokenizer: Tokenizer, policy: CompactionPolicy | None = None, *,
                 related_threshold: float, clock: Callable[[], float] = time.time,
                 redact: Callable[[str], str] = redact_pii, max_new_chunks: int = 10,
                 memo: MessageMemo | None = None, tool_results: bool = False) -> None:
        """`memo`: the dates written in each message, kept across runs (a run dates the whole
        transcript: searching 600 messages again each time grew with the conversation).
        `tool_results`: tool results are summarised with the rest (the tenant's
        `memory.recall_tool_results`); otherwise a span's summary is of what the user and the
        assistant said."""
        self.store = chunk_store
        self.summarizer = summarizer
        self.embed = embed
        self.tokenizer = tokenizer
        self.policy = policy or CompactionPolicy()
        self.related_threshold = related_threshold
        self.clock = clock
        self.redact = redact
        self.max_new_chunks = max_new_chunks
        self.memo = memo if memo is not None else MessageMemo()
        self.tool_results = tool_results

    async def process(self, key: ConversationKey, transcript: Sequence[StoredMessage], *,
                      topic_start: int | None = None,
                      writes: Writes | None = None) -> CompactionResult:
        """`writes`: whose transactions write the chunks (the job's fence; default: the
        store's direct ones). `topic_start`: where the conversation's current topic starts, when the topic
        tracker (gateway/memory/jobs/topic_tracker.py) knows it. Then a topic shift is a finished
        topic not yet summarised (it starts before `topic_start` and chunks do not cover it),
        compacted into a chunk of its own; else the newest message is compared with the
        recent window here (`_topic_shift`)."""
        transcript = tuple(transcript)
        stored = await self.store.list(key)
        chunks = chunks_on_branch(stored, [m.id for m in transcript])
        if len(chunks) < len(stored):
            await self._replace(key, stored, chunks, writes=writes)
            log.info("compaction: %d chunk(s) left the active branch of %s",
                     len(stored) - len(chunks), key)
        removed = len(stored) - len(chunks)

        roles = [m.message.role for m in transcript]
        tokens = self._token_counts(transcript, chunks)
        dates: list[date | None] | None = None  # read off the whole transcript: only if needed
        created, shift, pending = 0, None, False
        while True:
            span = plan_compaction(roles, tokens, chunks, self.policy)
            if span is None and shift is None and topic_start is not None:
                shift = covered_until(chunks) < topic_start
                span = plan_compaction(roles, tokens, chunks, self.policy, topic_shift=shift,
                                       topic_start=topic_start)
            elif span is None and shift is None:
                early = plan_compaction(roles, tokens, chunks, self.policy, topic_shift=True)
                if early is not None:
                    shift = await self._topic_shift(transcript)
                    span = early if shift else None
            if span is None:
                break
            if created == self.max_new_chunks:
                pending = True
                break
            if dates is None:
                dates = self._dates(transcript)
            chunk = await self._summarise(transcript, span, chunks, dates)
            vector = await self._vector(chunk.text)
            if not await self.store.append(key, chunk, vector, writes=writes):
                raise CompactionConflict(f"chunks of {key} changed during compaction")
            chunks += (chunk,)
            created += 1

        merged = 0
        while (index := plan_merge(chunks, self.policy.max_chunks)) is not None:
            chunks = await self._merge(key, chunks, index, writes)
            merged += 1
        return CompactionResult(chunks=chunks, created=created, merged=merged, removed=removed,
                                topic_shift=shift, pending=pending)

    def _token_counts(self, transcript: tuple[StoredMessage, ...],
                      chunks: tuple[SummaryChunk, ...]) -> list[int]:
        """Tokens per message; 0 for messages chunks already cover (never planned again)."""
        start = chunks[-1].last_position + 1 if chunks else 0
        return [count_message(m.message, self.tokenizer) if i >= start else 0
                for i, m in enumerate(transcript)]

    def _dates(self, transcript: tuple[StoredMessage, ...]) -> list[date | None]:
        """The date of each message: from dates written in the conversation when it has
        any (a session marker such as "1:56 pm on 8 May, 2023"), else when it was recorded."""
        # "": the message writes no date (the memo holds no None).
        found = [self.memo.derive("date_opening", m.id,
                                  lambda m=m: opening_date(m.message.text) or "")
                 for m in transcript]
        written = dates_of(carried([f or None for f in found]))
        if any(written):
            return written
        return [datetime.fromtimestamp(m.created_at, timezone.utc).date()
                if m.created_at > 0 else None for m in transcript]

    async def _summarise(self, transcript: tuple[StoredMessage, ...], span: Span,
                         chunks: tuple[SummaryChunk, ...],
                         dates: list[date | None]) -> SummaryChunk:
        messages = transcript[span.first:span.last + 1]
        utterances = [self._utterance(m) for m in messages if self._summarised(m)]
        previous = next((c.text for c in reversed(chunks) if not c.deleted), None)
        summary = await self.summarizer.summarize(
            utterances, target_tokens=self.policy.chunk_max_tokens, previous=previous)
        text = self.redact(summary.text)  # a model may restore what it was not shown; cheap
        start_date, end_date = span_dates(dates[span.first:span.last + 1])
        source_ids = tuple(m.id for m in messages)
        log.info("compaction: span %d-%d (%d rounds, %d tokens, %s) -> %s chunk of %d tokens",
                 span.first, span.last, span.rounds, span.tokens, span.reason, summary.method,
                 self.tokenizer.count(text))
        return SummaryChunk(id=chunk_id(source_ids), text=text, source_ids=source_ids,
                            first_position=span.first, last_position=span.last,
                            start_date=start_date, end_date=end_date,
                            tokens=self.tokenizer.count(text), created_at=self.clock(),
                            method=summary.method)

    def _summarised(self, message: StoredMessage) -> bool:
        return has_content(message.message) and (self.tool_results
                                                 or not is_tool_result(message.message))

    def _utterance(self, message: StoredMessage) -> Utterance:
        name = message.message.get("name")
        return Utterance(role=message.message.role, text=self.redact(message.message.text),
                         label=name.strip() if isinstance(name, str) and name.strip() else None)

    async def _topic_shift(self, transcript: tuple[StoredMessage, ...]) -> bool:
        """Whether the newest user message is unrelated to the rest of the recent window."""
        roles = [m.message.role for m in transcript]
        # The newest user message that says something (a one-shot placeholder does not).
        newest = next((i for i in range(len(transcript) - 1, -1, -1)
                       if roles[i] == "user" and has_content(transcript[i].message)), None)
        if newest is None:
            return False
        start = recent_window_start(roles, self.policy.recent_window_turns)
        question = self.redact(transcript[newest].message.text)
        window = [self.redact(m.message.text) for m in transcript[start:newest]
                  if has_content(m.message)]
        if not window or self.tokenizer.count(question) < MIN_TOPIC_TOKENS:
            return False
        vectors = np.asarray(await self.embed([question, *window]), dtype=np.float32)
        similarity = float(np.max(vectors[1:] @ vectors[0]))
        return is_topic_shift(similarity, self.related_threshold)

    async def _merge(self, key: ConversationKey, chunks: tuple[SummaryChunk, ...],
                     index: int, writes: Writes | None) -> tuple[SummaryChunk, ...]:
        older, newer = chunks[index], chunks[index + 1]
        utterances = utterances_from_summary(older.text) + utterances_from_summary(newer.text)
        text = self.summarizer.extractive(utterances, self.policy.chunk_max_tokens)
        merged = merged_chunk(older, newer, text=text, tokens=self.tokenizer.count(text),
                              created_at=self.clock())
        result = chunks[:index] + (merged,) + chunks[index + 2:]
        vector = await self._vector(text)
        await self._replace(key, chunks, result, {merged.id: vector} if vector is not None
                            else None, writes=writes)
        return result

    async def _vector(self, text: str) -> np.ndarray | None:
        if not text.strip():
            return None
        return np.asarray(await self.embed([text]), dtype=np.float32)[0]

    async def _replace(self, key: ConversationKey, expected: tuple[SummaryChunk, ...],
                       chunks: tuple[SummaryChunk, ...],
                       vectors: dict[str, np.ndarray] | None = None, *,
                       writes: Writes | None = None) -> None:
        if not await self.store.replace(key, expected, chunks, vectors, writes=writes):
            raise CompactionConflict(f"chunks of {key} changed during compaction")
