"""core.compaction: when older turns become a summary chunk, which turns, and merging."""

from __future__ import annotations

from datetime import date

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.memory.compaction import (
    CompactionPolicy, SummaryChunk, chunk_id, chunks_on_branch, covered_until, date_anchor,
    is_topic_shift, merged_chunk, message_dates, plan_compaction, plan_merge,
    recent_window_start, render_chunk, span_dates)

POLICY = CompactionPolicy(min_rounds=5, min_tokens=1200, recent_window_turns=4)


def rounds(n: int) -> list[str]:
    return ["user", "assistant"] * n


def chunk(first: int, last: int, *, ids: tuple[str, ...] | None = None, text: str = "s",
          start: str | None = None, end: str | None = None) -> SummaryChunk:
    source_ids = ids or tuple(f"m{i}" for i in range(first, last + 1))
    return SummaryChunk(id=chunk_id(source_ids), text=text, source_ids=source_ids,
                        first_position=first, last_position=last, start_date=start,
                        end_date=end, tokens=1, created_at=0.0, method="extractive")


def plan(roles: list[str], tokens: list[int] | None = None, chunks=(), policy=POLICY,
         **kwargs):
    return plan_compaction(roles, tokens or [10] * len(roles), chunks, policy, **kwargs)


def test_nothing_is_summarised_while_every_turn_is_in_the_recent_window():
    assert plan(rounds(4)) is None
    assert plan(rounds(2)) is None
    assert plan([]) is None


def test_turns_beyond_the_window_wait_until_they_reach_min_rounds():
    assert plan(rounds(4 + 4)) is None
    span = plan(rounds(4 + 5))
    assert (span.first, span.last, span.rounds, span.reason) == (0, 9, 5, "rounds")


def test_token_threshold_summarises_before_min_rounds():
    roles = rounds(4 + 2)
    tokens = [400] * 4 + [10] * 8  # two long rounds beyond the window
    span = plan(roles, tokens)
    assert (span.first, span.last, span.rounds, span.tokens, span.reason) == (0, 3, 2, 1600,
                                                                               "tokens")
    tokens = [700] * 4 + [10] * 8  # one round already reaches 1200: it goes alone
    assert (plan(roles, tokens).first, plan(roles, tokens).last) == (0, 1)


def test_a_backlog_is_cut_into_spans_of_the_fewest_turns_reaching_the_threshold():
    roles = rounds(4 + 12)
    first = plan(roles)
    assert (first.first, first.last) == (0, 9)
    second = plan(roles, chunks=(chunk(0, 9),))
    assert (second.first, second.last) == (10, 19)
    assert plan(roles, chunks=(chunk(0, 9), chunk(10, 19))) is None  # 2 rounds left


def test_span_starts_right_after_the_last_chunk():
    span = plan(rounds(4 + 10), chunks=(chunk(0, 9),))
    assert (span.first, span.last) == (10, 19)


def test_a_turn_with_tool_calls_and_results_is_never_split():
    roles = ["user", "assistant", "tool", "tool", "assistant"] + rounds(4 + 4)
    span = plan(roles)
    assert (span.first, span.last) == (0, 12)  # 5 rounds, the tool turn whole
    assert roles[span.last + 1] == "user"


def test_messages_before_the_first_user_message_belong_to_the_first_span():
    roles = ["assistant"] + rounds(4 + 5)
    span = plan(roles)
    assert (span.first, span.last) == (0, 10)


def test_topic_shift_summarises_early_once_two_rounds_wait():
    roles = rounds(4 + 2)
    assert plan(roles) is None
    span = plan(roles, topic_shift=True)
    assert (span.first, span.last, span.reason) == (0, 3, "topic_shift")


def test_topic_shift_does_not_summarise_a_single_round():
    assert plan(rounds(4 + 1), topic_shift=True) is None


def test_topic_shift_is_a_similarity_below_the_threshold():
    assert is_topic_shift(0.1, 0.5)
    assert not is_topic_shift(0.5, 0.5)
    assert not is_topic_shift(0.9, 0.5)


def test_recent_window_starts_at_the_user_message_of_its_oldest_turn():
    roles = ["user", "assistant", "tool", "user", "assistant", "user"]
    assert recent_window_start(roles, 2) == 3
    assert recent_window_start(roles, 3) == 0
    assert recent_window_start(roles, 4) == 0


def test_plan_merge_picks_the_oldest_pair_only_beyond_the_cap():
    chunks = tuple(chunk(i, i) for i in range(4))
    assert plan_merge(chunks, 4) is None
    assert plan_merge(chunks, 3) == 0
    assert plan_merge(chunks[:2], 2) is None


def test_merged_chunk_covers_both_spans_and_dates():
    older = chunk(0, 3, start="2023-05-01", end="2023-05-02")
    newer = chunk(4, 7, start="2023-05-03", end="2023-05-09")
    merged = merged_chunk(older, newer, text="both", tokens=1, created_at=5.0)
    assert merged.source_ids == older.source_ids + newer.source_ids
    assert (merged.first_position, merged.last_position) == (0, 7)
    assert (merged.start_date, merged.end_date) == ("2023-05-01", "2023-05-09")
    assert merged.method == "merged" and merged.id == chunk_id(merged.source_ids)
    with pytest.raises(ValueError):
        merged_chunk(older, chunk(5, 7), text="gap", tokens=1, created_at=5.0)


def test_chunks_off_the_active_branch_are_dropped_with_every_later_chunk():
    chunks = (chunk(0, 3), chunk(4, 7), chunk(8, 11))
    branch = [f"m{i}" for i in range(6)] + [f"fork{i}" for i in range(6, 14)]
    assert chunks_on_branch(chunks, branch) == chunks[:1]
    assert chunks_on_branch(chunks, [f"m{i}" for i in range(20)]) == chunks
    assert chunks_on_branch(chunks, [f"m{i}" for i in range(10)]) == chunks[:2]  # shorter


def test_render_chunk_shows_the_date_span_and_nothing_for_a_deleted_chunk():
    assert render_chunk(chunk(0, 1, text="Met Anna.", start="2023-05-08", end="2023-05-08")) \
        == "[2023-05-08] Met Anna."
    assert render_chunk(chunk(0, 1, text="x", start="2023-05-08", end="2023-06-01")) \
        == "[2023-05-08 – 2023-06-01] x"
    assert render_chunk(chunk(0, 1, text="No dates.")) == "No dates."
    assert render_chunk(chunk(0, 1, text="", start="2023-05-08")) == ""
    assert date_anchor(None, None) is None


def test_message_dates_carry_the_last_written_date_forward():
    texts = ["hi", "1:56 pm on 8 May, 2023: hello", "fine", "2024年3月2日 上午10:00 你好", "好"]
    assert message_dates(texts) == [None, date(2023, 5, 8), date(2023, 5, 8), date(2024, 3, 2),
                                    date(2024, 3, 2)]
    assert span_dates(message_dates(texts)[1:]) == ("2023-05-08", "2024-03-02")
    assert span_dates([None]) == (None, None)


def test_policy_rejects_impossible_settings():
    with pytest.raises(ValueError):
        CompactionPolicy(min_rounds=0)
    with pytest.raises(ValueError):
        CompactionPolicy(max_chunks=1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["user", "assistant", "tool"]), max_size=80),
       st.integers(1, 6), st.integers(1, 8), st.integers(20, 400))
def test_repeated_plans_cover_every_turn_beyond_the_window_exactly_once(
        roles, window, min_rounds, min_tokens):
    policy = CompactionPolicy(min_rounds=min_rounds, min_tokens=min_tokens,
                              recent_window_turns=window)
    tokens = [(i * 37) % 90 + 5 for i in range(len(roles))]
    chunks: tuple[SummaryChunk, ...] = ()
    while (span := plan_compaction(roles, tokens, chunks, policy, topic_shift=True)):
        assert span.first == covered_until(chunks)
        assert span.last + 1 == len(roles) or roles[span.last + 1] == "user"
        chunks += (chunk(span.first, span.last),)
    start, end = covered_until(chunks), recent_window_start(roles, window)
    assert start <= end
    # What is left before the window is too little even for an early summary.
    left_rounds = roles[start:end].count("user")
    assert left_rounds < policy.topic_shift_min_rounds and left_rounds < min_rounds
    assert sum(tokens[start:end]) < min_tokens
