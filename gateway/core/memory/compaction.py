"""Rolling conversation summaries: what a summary chunk is, and when to make or merge one.

A conversation's chunks summarise its older turns. They are kept
oldest first and, together, cover a prefix of the active branch's transcript:

- chunk k covers the transcript positions `first_position..last_position` (inclusive), and the
  next chunk starts right after it: chunks never overlap and leave no gap (a chunk a user
  deleted stays as a blank tombstone, so its span stays covered and is not summarised again);
- a span always starts at a turn boundary (a user message, or position 0) and ends just before
  one, so a tool call is never separated from its result and a turn is never split;
- the newest `recent_window_turns` user turns are never summarised: they stay verbatim.

The summary block shown to the model is these chunks in order, so it changes only when a
compaction appends (or a merge rewrites) a chunk — upstream prompt caches keep hitting between
compactions. Everything here is pure: the memory worker (gateway/memory/jobs/compactor.py) feeds in
the transcript and the stored chunks, and performs what the plans say.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import date
from typing import Literal, Sequence

from gateway.core.text.dates import anchor_dates, find_dates

ChunkMethod = Literal["llm", "extractive", "merged"]
SpanReason = Literal["rounds", "tokens", "topic_shift"]


@dataclass(frozen=True, slots=True)
class SummaryChunk:
    """The summary of one span of turns.

    `text` is redacted summary text without its date anchor (`render_chunk` adds it); an empty
    text is a tombstone left by a user's deletion: it keeps its span covered and shows nothing.
    `source_ids` are the stored ids of every message of the span, in transcript order.
    """

    id: str
    text: str
    source_ids: tuple[str, ...]
    first_position: int
    last_position: int
    start_date: str | None
    """ISO date (YYYY-MM-DD) the span starts at, when known."""
    end_date: str | None
    tokens: int
    created_at: float
    method: ChunkMethod

    def __post_init__(self) -> None:
        object.__setattr__(self, "source_ids", tuple(self.source_ids))
        if self.last_position < self.first_position:
            raise ValueError("a chunk's last_position precedes its first_position")

    @property
    def deleted(self) -> bool:
        return not self.text.strip()


@dataclass(frozen=True, slots=True)
class CompactionPolicy:
    """When a conversation's older turns are summarised (per tenant; config maps onto this)."""

    min_rounds: int = 5
    """Summarise once the unsummarised turns beyond the recent window hold this many rounds."""
    min_tokens: int = 1200
    """... or this many tokens, whichever comes first."""
    recent_window_turns: int = 4
    """The newest user turns that always stay verbatim (never summarised)."""
    max_chunks: int = 30
    """Beyond this many chunks, the oldest two are merged into one."""
    chunk_max_tokens: int = 400
    """Target length of one chunk's text (summaries and merges)."""
    topic_shift_min_rounds: int = 2
    """On a topic shift, summarise early once the span holds this many rounds."""

    def __post_init__(self) -> None:
        for name in ("min_rounds", "min_tokens", "recent_window_turns", "max_chunks",
                     "chunk_max_tokens", "topic_shift_min_rounds"):
            if getattr(self, name) < 1:
                raise ValueError(f"CompactionPolicy.{name} must be at least 1")
        if self.max_chunks < 2:
            raise ValueError("CompactionPolicy.max_chunks must be at least 2 (merging needs two)")


@dataclass(frozen=True, slots=True)
class Span:
    """Transcript positions `first..last` (inclusive) to summarise into one chunk."""

    first: int
    last: int
    rounds: int
    """User messages in the span."""
    tokens: int
    reason: SpanReason


def covered_until(chunks: Sequence[SummaryChunk]) -> int:
    """The first transcript position no chunk covers (0 without chunks)."""
    return chunks[-1].last_position + 1 if chunks else 0


def recent_window_start(roles: Sequence[str], recent_window_turns: int) -> int:
    """Position of the first message of the recent window: the user message opening the
    `recent_window_turns`-th newest user turn (0 when there are not that many turns)."""
    user_positions = [i for i, role in enumerate(roles) if role == "user"]
    if len(user_positions) < recent_window_turns:
        return 0
    return user_positions[-recent_window_turns]


def plan_compaction(roles: Sequence[str], tokens: Sequence[int],
                    chunks: Sequence[SummaryChunk], policy: CompactionPolicy, *,
                    topic_shift: bool = False, topic_start: int | None = None) -> Span | None:
    """The next span to summarise now, or None.

    `roles` and `tokens` describe the active branch's transcript message by message. The
    candidate turns lie after the last chunk and before the recent window. The span is the
    fewest whole turns, oldest first, reaching `min_rounds` rounds or `min_tokens` tokens; when
    all the candidates together reach neither, they are summarised early only on a
    `topic_shift`, if they hold at least `topic_shift_min_rounds` rounds. Calling again after
    the span's chunk was added plans the next span, so a backlog becomes several chunks of
    similar size, and a finished plan (None) stays None until new turns arrive.

    `topic_start`: where the current topic starts (a user message; the topic tracker knows
    it). On a `topic_shift`, the early span then ends before it — the finished topic becomes
    its own chunk, never mixed with the new one's turns.
    """
    if len(roles) != len(tokens):
        raise ValueError("one token count per message")
    start = covered_until(chunks)
    end = recent_window_start(roles, policy.recent_window_turns)  # exclusive
    if start >= end:
        return None
    rounds = total = 0
    for position in range(start, end):
        total += tokens[position]
        rounds += roles[position] == "user"
        turn_ends = position + 1 == end or roles[position + 1] == "user"
        if not turn_ends:
            continue
        if rounds >= policy.min_rounds:
            return Span(start, position, rounds, total, "rounds")
        if total >= policy.min_tokens:
            return Span(start, position, rounds, total, "tokens")
    if not topic_shift:
        return None
    if topic_start is not None and start < topic_start < end:
        end = topic_start
        rounds = sum(role == "user" for role in roles[start:end])
        total = sum(tokens[start:end])
    if rounds >= policy.topic_shift_min_rounds:
        return Span(start, end - 1, rounds, total, "topic_shift")
    return None


def is_topic_shift(similarity: float, threshold: float) -> bool:
    """The new message is on another topic when it is less similar than `threshold` to
    everything in the recent window (similarity: the best cosine against the window)."""
    return similarity < threshold


def plan_merge(chunks: Sequence[SummaryChunk], max_chunks: int) -> int | None:
    """Index `i` such that chunks i and i+1 should be merged now, or None when within the cap.

    The oldest pair goes first: old detail matters least to the next reply. (A merge rewrites
    the summary block from its start, so the upstream's prompt cache misses once; it happens
    only when a compaction pushes the count over the cap.) Apply repeatedly until None.
    """
    if len(chunks) <= max(2, max_chunks):
        return None
    return 0


def chunks_on_branch(chunks: Sequence[SummaryChunk],
                     transcript_ids: Sequence[str]) -> tuple[SummaryChunk, ...]:
    """The longest prefix of `chunks` whose spans are still on the active branch.

    A chunk is on the branch when the transcript holds exactly its source ids at its
    positions. Message ids are chained hashes, so once one chunk is off the branch (a client
    edited or regenerated a turn inside or before it) every later one is too: they are all
    dropped, and their turns summarised again from the branch that is active now.
    """
    kept = []
    for chunk in chunks:
        span = transcript_ids[chunk.first_position:chunk.last_position + 1]
        if chunk.last_position >= len(transcript_ids) or tuple(span) != chunk.source_ids:
            break
        kept.append(chunk)
    return tuple(kept)


def chunk_id(source_ids: Sequence[str]) -> str:
    """Deterministic id of the chunk covering `source_ids`: the same span, the same id."""
    digest = hashlib.sha256("\n".join(source_ids).encode()).hexdigest()
    return digest[:24]


def merged_chunk(older: SummaryChunk, newer: SummaryChunk, *, text: str, tokens: int,
                 created_at: float) -> SummaryChunk:
    """One chunk covering two adjacent chunks' spans, with `text` summarising both."""
    if newer.first_position != older.last_position + 1:
        raise ValueError("only adjacent chunks can be merged")
    source_ids = older.source_ids + newer.source_ids
    starts = [d for d in (older.start_date, newer.start_date) if d]
    ends = [d for d in (older.end_date, newer.end_date) if d]
    return SummaryChunk(id=chunk_id(source_ids), text=text, source_ids=source_ids,
                        first_position=older.first_position, last_position=newer.last_position,
                        start_date=min(starts) if starts else None,
                        end_date=max(ends) if ends else None, tokens=tokens,
                        created_at=created_at, method="merged")


def date_anchor(start_date: str | None, end_date: str | None) -> str | None:
    """"2024-03-01", "2024-03-01 – 2024-03-05", or None without dates."""
    if not start_date and not end_date:
        return None
    if not start_date or not end_date or start_date == end_date:
        return start_date or end_date
    return f"{start_date} – {end_date}"


def render_chunk(chunk: SummaryChunk) -> str:
    """The text the model sees for a chunk: its date anchor, then its summary ("" if deleted)."""
    if chunk.deleted:
        return ""
    anchor = date_anchor(chunk.start_date, chunk.end_date)
    return f"[{anchor}] {chunk.text}" if anchor else chunk.text


def message_dates(texts: Sequence[str]) -> list[date | None]:
    """The calendar date each message of a conversation (oldest first) belongs to: the last
    complete date written at or before it (gateway.core.text.dates.anchor_dates), None before the
    first one."""
    return dates_of(anchor_dates(texts))


def dates_of(anchors: Sequence[str | None]) -> list[date | None]:
    """`message_dates` from the messages' anchors (gateway.core.text.dates.carried)."""
    parsed: dict[str, date | None] = {}  # a conversation repeats few anchors, many times
    out: list[date | None] = []
    for anchor in anchors:
        if anchor is None:
            out.append(None)
            continue
        if anchor not in parsed:
            mentions = find_dates(anchor)
            parsed[anchor] = mentions[0].date if mentions else None
        out.append(parsed[anchor])
    return out


def span_dates(dates: Sequence[date | None]) -> tuple[str | None, str | None]:
    """Earliest and latest of `dates` as ISO strings, or (None, None) without any."""
    known = [d for d in dates if d is not None]
    return (min(known).isoformat(), max(known).isoformat()) if known else (None, None)
