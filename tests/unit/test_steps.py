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
from gateway.core.messages import Message
from gateway.core.policy import ContextPolicy
from gateway.core.recall.recollection import Recollection
from gateway.core.text.tokens import count_messages
from tests.unit.test_rewrite import TOK, assistant, user
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
    @given(requests(word_texts, TOK), st.sampled_from([0.2, 0.5, 0.8, 1.0]))
    def run(request, window_share) -> None:
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
    assert out.stable_messages == len(instructions) + head + len(window)
    assert "summary" in out.memory_blocks or head == 0
    length = request.policy.truncate_message_tokens
    if request.policy.recent_share > 0:
        length = min(length, max(1, int(request.policy.recent_share * budget)))
    suffix = history[len(history) - len(window):] if window else ()
    for kept, original in zip(window, suffix):
        check_kept_message(kept, original, length, TOK)
    check_window_starts_at_a_turn(history, window)
    shown = {i for i in request.history_ids[len(history) - len(window):] if i is not None} \
        if request.history_ids else set()
    assert not shown & set(out.recalled_ids)
    return "compacted"


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
