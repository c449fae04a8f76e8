"""The stepped assembly (gateway/core/context/steps.py and `assembly: stepped` in
gateway/core/context/rewrite.py): a verbatim window whose start moves only in steps, so that
consecutive prompts of a growing conversation share their prefix.

Checked: the step points and the window's start as pure functions (stable under appends, never
moving backwards, within the allowance); the rewrite's general invariants on the random
requests of test_rewrite_properties.py with the stepped assembly; and over conversations grown
one exchange at a time, that each prompt starts with the previous prompt's stable prefix except
at steps, that steps are as rare as the allowance makes them, and that the profile and recalled
items come after the window."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from itertools import accumulate

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core.context.blocks import MemoryContext
from gateway.core.context.rewrite import Rewrite, RewriteRequest, rewrite
from gateway.core.context.steps import estimated_costs, step_points, window_starts
from gateway.core.context.window import Window, served_start, without_middle
from gateway.core.messages import Message
from gateway.core.policy import ContextPolicy
from gateway.core.recall.recollection import Recollection
from gateway.core.text.tokens import count_messages
from tests.unit.test_rewrite import TOK, assistant, calls, user
from tests.unit.test_rewrite_properties import (
    assert_reached,
    check_kept_message,
    check_tool_calls_travel_with_their_results,
    check_tool_loop,
    check_window_starts_at_a_turn,
    forwardable_history,
    reach,
    requests,
    word_texts,
)

SOME = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
"""Fewer than the rolling assembly's 200: the shared strategy is slow, and the stepped path
differs from the rolling one only past the whole-history check."""
roles = st.lists(st.sampled_from(["user", "assistant", "tool"]), max_size=40)


@st.composite
def histories(draw) -> tuple[tuple[Message, ...], tuple[int, ...]]:
    kinds = draw(roles)
    costs = tuple(draw(st.lists(st.integers(1, 80), min_size=len(kinds), max_size=len(kinds))))
    return tuple(Message.of(r, "x") for r in kinds), costs


# --- the pure pieces ---------------------------------------------------------------------


@given(histories(), st.integers(1, 200), st.integers(0, 40))
def test_step_points_of_a_history_are_those_of_every_extension(drawn, step, cut) -> None:
    history, costs = drawn
    cut = min(cut, len(history))
    whole = step_points(history, costs, step)
    assert step_points(history[:cut], costs[:cut], step) == tuple(p for p in whole if p < cut)
    assert all(history[p].role == "user" for p in whole)
    totals = (0, *accumulate(costs))
    assert all(totals[b] - totals[a] >= step for a, b in zip(whole, whole[1:]))


@given(histories(), st.integers(1, 400))
def test_the_window_start_moves_forward_only_when_it_must(drawn, allowance) -> None:
    history, costs = drawn
    step = max(1, allowance // 2)
    previous = None
    for n in range(1, len(history) + 1):
        start = next(window_starts(history[:n], costs[:n], allowance, step), None)
        if start is None:
            continue
        assert sum(costs[start:n]) <= allowance and history[start].role == "user"
        if previous is not None:
            assert start >= previous
            if sum(costs[previous:n]) <= allowance:  # the old start still fits: it stays
                assert start == previous
        previous = start


def test_estimated_costs_cap_long_messages_at_their_shortened_length() -> None:
    assert estimated_costs((5, 500, 30), 20) == (5, 36, 30)


@SOME
@given(histories(), st.integers(0, 40), st.integers(1, 4), st.integers(0, 2000))
def test_a_window_leaves_out_its_newest_turns_before_the_served_ones(drawn, start, turns,
                                                                     target) -> None:
    history, costs = drawn
    starts = [i for i, m in enumerate(history) if m.role == "user" and i >= start]
    if not starts:
        return
    start = starts[0]
    window = Window(messages=history[start:], cost=sum(costs[start:]))
    served = served_start(history, start, turns)
    cut = without_middle(history, costs, window, served, target, TOK)
    if cut is None:
        return
    head = cut.gap_at
    assert cut.gap > 0 and head + cut.gap == served - start
    assert cut.messages == history[start:start + head] + history[served:]  # same opening
    assert [history[i] for i in cut.indexes(len(history))] == list(cut.messages)
    assert cut.cost == sum(costs[start:start + head]) + sum(costs[served:])
    # what is left out is whole turns: it starts at a user message (a call never loses its
    # results), and the head is the longest run of turns that fits beside the served ones
    assert history[start + head].role == "user"
    assert head == 0 or cut.cost <= target
    longer = next((i for i in range(start + head + 1, served) if history[i].role == "user"),
                  served)
    assert sum(costs[start:longer]) + sum(costs[served:]) > target


def check_ends(request: RewriteRequest, out: Rewrite) -> bool:
    """The counts are true, the instructions come first and the current turn last, verbatim;
    True when they alone are over the budget (then they are all there is)."""
    instructions, current, messages = request.instructions, request.current, out.messages
    assert out.tokens_forwarded == count_messages(messages, TOK)
    assert messages[:len(instructions)] == instructions
    assert messages[len(messages) - len(current):] == current
    if out.over_budget:
        assert messages == instructions + current
    return out.over_budget


# --- the rewrite's invariants, stepped -------------------------------------------------------


def test_stepped_rewrite_keeps_the_rewrite_invariants() -> None:
    reached: Counter[str] = Counter()

    @SOME
    @given(requests(word_texts, TOK), st.sampled_from([0.2, 0.5, 0.8, 1.0]), st.booleans())
    def run(request, window_share, past) -> None:
        if past and request.current and request.current[0].role == "user":
            # a question about the past: the window may leave out its middle for recall
            request = replace(request, current=(user(PAST),) + request.current[1:])
        reach(reached, check_stepped(request, window_share))

    run()
    assert_reached(reached, "whole history", "compacted")


def check_stepped(request: RewriteRequest, window_share: float) -> str:
    """The rewrite's invariants with `stepped` assembly; returns the branch reached: "tool
    loop", "over budget", "whole history" or "compacted" (the deepest)."""
    request = replace(request, policy=replace(request.policy, assembly="stepped",
                                              window_share=window_share))
    out = rewrite(request, TOK)
    instructions, history, current = request.instructions, request.history, request.current
    messages, budget = out.messages, request.policy.prompt_budget
    if check_tool_loop(request, out, TOK):
        return "tool loop"
    if check_ends(request, out):
        return "over budget"
    assert out.tokens_forwarded <= budget
    check_tool_calls_travel_with_their_results(messages)
    forwardable = forwardable_history(history)
    middle = messages[len(instructions):len(messages) - len(current)]
    head = sum(1 for name in out.memory_blocks if name in ("pinned", "summary"))
    tail = sum(1 for name in out.memory_blocks if name in ("profile", "recalled"))
    window = middle[head:len(middle) - tail]
    if count_messages(instructions + forwardable + current, TOK) <= budget:
        assert window == forwardable  # whole, verbatim
        # the next request repeats the current turn too when nothing follows the history
        assert out.stable_messages == (len(messages) if tail == 0
                                       else len(instructions) + head + len(window))
        return "whole history"
    # a window with a gap is its head (the stable prefix), the turns it left out, the rest
    gap_at = out.stable_messages - len(instructions) - head if out.window_gap else len(window)
    assert out.stable_messages == len(instructions) + head + gap_at
    assert "summary" in out.memory_blocks or head == 0
    length = request.policy.truncate_message_tokens
    if request.policy.recent_share > 0:
        length = min(length, max(1, int(request.policy.recent_share * budget)))
    start = len(history) - len(window) - out.window_gap
    indexes = [*range(start, start + gap_at),
               *range(start + gap_at + out.window_gap, len(history))]
    for kept, i in zip(window, indexes):
        check_kept_message(kept, history[i], length, TOK)
    check_window_starts_at_a_turn(history[:start + len(window)], window)
    if out.window_gap:
        assert history[start + gap_at].role == "user"  # whole turns left out
    shown = {request.history_ids[i] for i in indexes} - {None} if request.history_ids else set()
    assert not shown & set(out.recalled_ids)
    return "compacted with a gap" if out.window_gap else "compacted"


# --- prefixes over a growing conversation ---------------------------------------------------


def grown(turns: int, policy: ContextPolicy, words: int = 30, recalled: bool = True):
    """The rewrites of a conversation grown one exchange at a time, with memory that changes
    every request (a recollection naming the turn, a profile that grows)."""
    history: list[Message] = []
    for n in range(turns):
        current = user(f"question {n} " + "w " * words)
        memory = MemoryContext(
            profile="likes tea" + " and cake" * (n // 10),
            recalled=(Recollection(kind="fact", id=f"f{n}", text=f"fact about {n}",
                                   source_ids=(), position=-1, score=1.0),) if recalled else ())
        yield rewrite(RewriteRequest((Message.of("system", "be brief"),), tuple(history),
                                     (current,), policy, memory), TOK)
        history += [current, assistant(f"answer {n} " + "v " * words)]


def test_between_steps_each_prompt_starts_with_the_previous_stable_prefix() -> None:
    policy = ContextPolicy(max_context_tokens=1200, reserve_completion_tokens=200,
                           assembly="stepped", window_share=0.5)
    outs = list(grown(80, policy))
    steps = 0
    for before, after in zip(outs, outs[1:]):
        stable = before.messages[:before.stable_messages]
        assert stable[0] == Message.of("system", "be brief")
        if after.messages[:len(stable)] != stable:
            steps += 1
            assert after.history_kept < before.history_kept  # only the window's start moved
        assert after.tokens_forwarded <= policy.prompt_budget
        # memory that changes every request is after the window, never inside the prefix
        assert not any("fact about" in m.text or "likes tea" in m.text
                       for m in after.messages[:after.stable_messages])
    # ~65 tokens an exchange, a window of 500 that restarts at ~250: a step every ~4 requests
    # once over budget (at ~15), not one every request as with the rolling window.
    assert 0 < steps <= 80 // 3, steps


def test_the_rolling_window_changes_its_prefix_every_request_over_budget() -> None:
    """The yardstick of the test above: what the stepped assembly is for."""
    policy = ContextPolicy(max_context_tokens=1200, reserve_completion_tokens=200,
                           max_recent_turns=4, recall_share=0.3, assembly="rolling")
    outs = list(grown(40, policy, recalled=False))
    over = [o for o in outs if o.history_kept < 2 * outs.index(o)]
    changed = sum(b.messages[:3] != a.messages[:3] for a, b in zip(over, over[1:]))
    assert changed >= len(over) - 2


def test_profile_and_recall_follow_the_window() -> None:
    policy = ContextPolicy(max_context_tokens=1200, reserve_completion_tokens=200,
                           assembly="stepped")
    out = list(grown(40, policy))[-1]
    assert out.memory_blocks == ("profile", "recalled")
    tail = out.messages[out.stable_messages:]
    assert len(tail) == 3 and "likes tea" in tail[0].text and "fact about 39" in tail[1].text
    assert out.recent_turns >= 3


def test_the_last_three_exchanges_stay_in_the_window_at_budgets_from_4000() -> None:
    """~600-token exchanges: a window of half the budget may hold fewer than three, so it
    starts at an earlier step point (or the third-newest turn) instead."""
    policy = ContextPolicy(max_context_tokens=5000, reserve_completion_tokens=0,
                           assembly="stepped", window_share=0.5)
    outs = list(grown(40, policy, words=300))
    over = [o for n, o in enumerate(outs) if o.history_kept < 2 * n]
    assert len(over) > 20
    assert all(o.recent_turns >= 3 and o.tokens_forwarded <= policy.prompt_budget
               for o in over)
    shared = sum(after.messages[:before.stable_messages]
                 == before.messages[:before.stable_messages]
                 for before, after in zip(over, over[1:]))
    assert shared >= len(over) // 2  # a cached prefix on most requests all the same
    # without the rule the same window holds fewer: what the rule is for
    fewer = list(grown(40, replace(policy, continuity_turns=0), words=300))
    assert min(o.recent_turns for o in fewer[-20:]) < 3


def test_auto_steps_from_a_4000_token_budget_and_rolls_below() -> None:
    """`assembly: auto` (the default): under ~4,000 tokens a prompt is mostly below the
    providers' 1,024-token cache minimum and the rolling layout recalls more."""
    auto = ContextPolicy(max_context_tokens=5000, compact_to_tokens=0,
                         reserve_completion_tokens=1000)
    assert auto.assembly == "auto" and auto.stepped
    assert not replace(auto, max_context_tokens=4999).stepped
    assert replace(auto, max_context_tokens=4999, assembly="stepped").stepped
    assert not replace(auto, assembly="rolling").stepped
    # the compacted size decides, not the window
    assert ContextPolicy().stepped and not replace(ContextPolicy(), compact_to_tokens=4000).stepped


# --- a question about the past ----------------------------------------------------------------


PAST = "what did I say last week about the garden"
OPEN = "what should I plant this week in my garden"  # as many words: the same budget left


def past_and_open(turns: int, policy: ContextPolicy, facts: int, words: int = 38):
    """For each length of a conversation, its rewrite for a question about the past and for
    an open one, with the same `facts` recalled (`words` + 2 words each)."""
    history: list[Message] = []
    memory = MemoryContext(recalled=tuple(
        Recollection(kind="fact", id=f"f{k}", text=f"fact {k} " + "g " * words, source_ids=(),
                     position=-1, score=1.0 - k / 100) for k in range(facts)))
    for n in range(turns):
        outs = tuple(rewrite(RewriteRequest((Message.of("system", "be brief"),),
                                            tuple(history), (user(text),), policy, memory), TOK)
                     for text in (PAST, OPEN))
        yield outs
        history += [user(f"question {n} " + "w " * 30), assistant(f"answer {n} " + "v " * 90)]


def test_a_question_about_the_past_gets_the_room_of_a_step_and_keeps_the_prefix() -> None:
    policy = ContextPolicy(max_context_tokens=3000, reserve_completion_tokens=0,
                           assembly="stepped")
    gaps = 0
    for past, open_ in past_and_open(60, policy, facts=30):
        assert open_.window_gap == 0
        assert past.tokens_forwarded <= policy.prompt_budget
        # the prefix the previous prompt cached is forwarded as it was, only shorter
        assert past.messages[:past.stable_messages] == open_.messages[:past.stable_messages]
        if past.window_gap:
            gaps += 1
            assert past.recalled > open_.recalled
            assert past.recent_turns >= policy.served_turns
            # the served turns are the newest ones, whole, right before the recalled block
            served = open_.messages[open_.stable_messages - 2 * policy.served_turns:
                                    open_.stable_messages]
            after_gap = past.stable_messages + 2 * policy.served_turns
            assert past.messages[past.stable_messages:after_gap] == served
            assert past.stable_messages + past.window_gap + len(served) \
                == open_.stable_messages
        else:
            assert past.messages[:-1] == open_.messages[:-1]
    assert gaps > 10  # late in each step's cycle, the window leaves the recall too little room


def test_a_question_about_the_past_whose_recall_fits_changes_nothing() -> None:
    policy = ContextPolicy(max_context_tokens=3000, reserve_completion_tokens=0,
                           assembly="stepped")
    for past, open_ in past_and_open(60, policy, facts=2):
        assert past.window_gap == 0 and past.messages[:-1] == open_.messages[:-1]
    # nor does one whose items fit no better after a step: the window stays whole
    for past, open_ in past_and_open(60, policy, facts=1, words=4000):
        assert past.window_gap == 0 and past.messages[:-1] == open_.messages[:-1]


@st.composite
def chats(draw) -> tuple[RewriteRequest, RewriteRequest]:
    """A stepped chat over its budget (old turns may call tools) with many recalled items,
    asked a question about the past and, as long, an open one."""
    words = st.integers(1, 80)
    history: list[Message] = []
    for n in range(draw(st.integers(2, 30))):
        history.append(user(f"q{n} " + "w " * draw(words)))
        if draw(st.integers(0, 5)) == 0:
            history.append(calls(f"c{n}"))
            history.append(Message.of("tool", "r " * draw(words), tool_call_id=f"c{n}"))
        history.append(assistant(f"a{n} " + "v " * draw(words)))
    memory = MemoryContext(recalled=tuple(
        Recollection(kind="fact", id=f"f{k}", text=f"fact {k} " + "g " * draw(words),
                     source_ids=(), position=-1, score=1.0 - k / 100)
        for k in range(draw(st.integers(0, 30)))))
    policy = ContextPolicy(max_context_tokens=draw(st.integers(300, 4000)),
                           reserve_completion_tokens=0, assembly="stepped",
                           window_share=draw(st.sampled_from([0.5, 0.8, 0.9, 1.0])),
                           continuity_budget=draw(st.sampled_from([0, 4000])))
    past = RewriteRequest((Message.of("system", "be brief"),), tuple(history), (user(PAST),),
                          policy, memory)
    return past, replace(past, current=(user(OPEN),))


def test_a_question_about_the_past_only_shortens_the_prefix() -> None:
    reached: Counter[str] = Counter()

    @SOME
    @given(chats())
    def run(drawn) -> None:
        past, open_ = drawn
        branch = check_stepped(past, past.policy.window_share)
        reach(reached, branch)
        a, b = rewrite(past, TOK), rewrite(open_, TOK)
        assert b.window_gap == 0
        if a.window_gap:
            assert a.messages[:a.stable_messages] == b.messages[:a.stable_messages]
            assert a.recalled_tokens > b.recalled_tokens
        else:
            assert a.messages[:-1] == b.messages[:-1]

    run()
    assert_reached(reached, "compacted", "compacted with a gap")
