"""A window larger than the compacted prompt (`max_context_tokens` > `compact_to_tokens`,
gateway/core/context/rewrite.py): a history within the window is forwarded whole and
append-only — each prompt of a growing conversation starts with the previous one's stable
prefix, which is all of its history — and past the window the prompt is compacted to
`compact_to_tokens`.

Checked over conversations grown one exchange at a time (the profile and recall change every
request), and the rewrite's invariants on the random requests of test_rewrite_properties.py
with a window above their compacted size."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core.context.blocks import MemoryContext
from gateway.core.context.rewrite import RewriteRequest, rewrite
from gateway.core.messages import Message
from gateway.core.policy import ContextPolicy
from gateway.core.recall.recollection import Recollection
from gateway.core.text.tokens import count_messages
from tests.unit.test_rewrite import TOK
from tests.unit.test_rewrite_properties import (assert_reached,
                                                check_tool_calls_travel_with_their_results,
                                                check_tool_loop, forwardable_history, reach,
                                                requests, word_texts)
from tests.unit.test_steps import check_ends, grown

SOME = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_a_history_within_the_window_goes_whole_and_append_only_then_is_compacted():
    for assembly in ("rolling", "stepped"):
        policy = ContextPolicy(max_context_tokens=3200, compact_to_tokens=1200,
                               reserve_completion_tokens=200, assembly=assembly)
        outs = list(grown(60, policy))  # ~65 tokens an exchange: past 3,000 at ~45
        whole = [o for n, o in enumerate(outs) if o.history_kept == 2 * n]
        assert len(whole) >= 40, assembly
        assert max(o.tokens_forwarded for o in whole) > policy.prompt_budget  # extended
        for before, after in zip(whole, whole[1:]):
            stable = before.messages[:before.stable_messages]
            assert after.messages[:len(stable)] == stable  # append-only: a cache hit
            assert after.stable_messages > before.stable_messages
            assert after.tokens_forwarded <= policy.whole_prompt_budget
            # what changes every request (profile, recall) comes after the history
            assert not any("fact about" in m.text or "likes tea" in m.text
                           for m in after.messages[:after.stable_messages])
        compacted = outs[len(whole):]
        assert compacted and all(o.tokens_forwarded <= policy.prompt_budget
                                 and o.history_kept < 2 * outs.index(o) for o in compacted)


def test_without_a_compacted_size_a_history_over_the_window_is_compacted_to_it():
    policy = ContextPolicy(max_context_tokens=1200, reserve_completion_tokens=200)
    assert policy.whole_prompt_budget == policy.prompt_budget
    outs = list(grown(30, policy))
    assert all(o.tokens_forwarded <= policy.prompt_budget for o in outs)
    assert outs[-1].history_kept < 2 * 29


def test_memory_from_outside_the_history_keeps_its_room_past_the_budget():
    """Past the budget the profile and recall get the room less the window's share, as in a
    compacted prompt — they do not vanish because the history grew."""
    policy = ContextPolicy(max_context_tokens=3200, compact_to_tokens=1200,
                           reserve_completion_tokens=200, window_share=0.5)
    outs = list(grown(40, policy))
    extended = [o for n, o in enumerate(outs)
                if o.history_kept == 2 * n and o.tokens_forwarded > policy.prompt_budget]
    assert len(extended) > 10
    for o in extended:
        # both shown, unless only the window's last few tokens are left (they cost ~30)
        assert (o.recalled == 1 and o.profile_tokens > 0) \
            or o.tokens_forwarded > policy.whole_prompt_budget - 60


def test_the_rewrite_invariants_hold_with_a_larger_window() -> None:
    reached: Counter[str] = Counter()

    @SOME
    @given(requests(word_texts, TOK), st.integers(0, 400),
           st.sampled_from(["rolling", "stepped"]))
    def run(request, extra, assembly) -> None:
        reach(reached, check_larger_window(request, extra, assembly))

    run()
    assert_reached(reached, "whole history", "compacted")


def check_larger_window(request: RewriteRequest, extra: int, assembly: str) -> str:
    """A window larger than the compacted size: what fits it goes whole; returns the branch
    reached: "tool loop", "over budget", "whole history" or "compacted"."""
    policy = request.policy
    policy = replace(policy, assembly=assembly, compact_to_tokens=policy.max_context_tokens,
                     max_context_tokens=policy.max_context_tokens + extra)
    request = replace(request, policy=policy)
    out = rewrite(request, TOK)
    instructions, current = request.instructions, request.current
    messages = out.messages
    if check_tool_loop(request, out, TOK):
        return "tool loop"  # compacted within the window (tests/unit/test_tool_loop.py)
    if check_ends(request, out):
        return "over budget"
    check_tool_calls_travel_with_their_results(messages)
    forwardable = forwardable_history(request.history)
    if count_messages(instructions + forwardable + current, TOK) <= policy.whole_prompt_budget \
            and not request.memory.pinned:
        # whole and verbatim (the same objects), within the window
        assert out.tokens_forwarded <= policy.whole_prompt_budget
        start = len(instructions)
        assert all(a is b for a, b in zip(messages[start:], forwardable))
        assert out.history_kept == len(forwardable)
        return "whole history"
    assert out.tokens_forwarded <= policy.prompt_budget
    return "compacted"


def test_window_and_compacted_size_are_prompt_plus_completion():
    policy = ContextPolicy(max_context_tokens=32000, compact_to_tokens=8000,
                           reserve_completion_tokens=1000)
    assert (policy.prompt_budget, policy.whole_prompt_budget) == (7000, 31000)
    for larger in (0, 40000):  # none, or larger than the window: the window
        assert replace(policy, compact_to_tokens=larger).prompt_budget == 31000


def _with_outside_memory(history_turns: int, outside_share: float):
    """A history that fits the window whole, and 100 turns recalled from other conversations
    (~42 words each) — more than the compacted prompt's whole room."""
    history = tuple(Message.of(role, f"{role} {n} " + "word " * 12)
                    for n in range(history_turns) for role in ("user", "assistant"))
    recalled = tuple(Recollection("turn", f"other{i}", f"elsewhere {i} " + "said " * 40, (),
                                  i, 1.0 - i / 1000) for i in range(100))
    policy = ContextPolicy(max_context_tokens=20_000, compact_to_tokens=3_000,
                           reserve_completion_tokens=500, outside_share=outside_share)
    request = RewriteRequest((), history, (Message.of("user", "and then?"),), policy,
                             MemoryContext(profile="likes tea", recalled=recalled))
    return policy, history, rewrite(request, TOK)


def test_memory_from_outside_a_whole_history_is_a_short_tail_once_there_is_a_history():
    """`outside_share`: the profile and recall from other conversations after a whole
    history take at most that share of the compacted prompt's room — a tail paid in full
    every turn — while the history itself is forwarded whole."""
    policy, history, out = _with_outside_memory(3, 0.1)
    assert out.history_kept == len(history) and out.recalled > 0
    assert out.profile_tokens + out.recalled_tokens <= 0.1 * policy.prompt_budget
    _, _, wide = _with_outside_memory(3, 1.0)  # the whole room, as before the share existed
    assert wide.history_kept == len(history)
    assert wide.recalled_tokens > 5 * out.recalled_tokens
    assert wide.tokens_forwarded <= policy.whole_prompt_budget


def test_a_conversation_s_first_request_gets_the_whole_room_for_outside_memory():
    """No history yet: memory of the user's other conversations is what the first message
    may need most, and the prompt is small anyway."""
    policy, _, first = _with_outside_memory(0, 0.1)
    assert first.recalled_tokens > 0.5 * policy.prompt_budget
    assert first.tokens_forwarded <= policy.prompt_budget


def test_a_profile_learned_from_this_conversation_alone_is_left_out_of_its_whole_history():
    """What the user said here is in the history forwarded whole: a profile learned from it
    says it again (a tail paid every turn). Compacted, the turns it was learned from may be
    gone, so it is shown there."""
    history = tuple(Message.of(role, f"{role} {n} " + "word " * 12)
                    for n in range(3) for role in ("user", "assistant"))
    policy = ContextPolicy(max_context_tokens=20_000, compact_to_tokens=3_000,
                           reserve_completion_tokens=500)
    current = (Message.of("user", "and then?"),)

    def forwarded(history, elsewhere):
        memory = MemoryContext(profile="likes tea", profile_elsewhere=elsewhere)
        return rewrite(RewriteRequest((), history, current, policy, memory), TOK)

    assert forwarded(history, True).profile_tokens > 0
    alone = forwarded(history, False)
    assert alone.profile_tokens == 0 and alone.messages == history + current
    long = history * 60  # ~6,000 tokens: past the compacted size's room, within the window
    assert forwarded(long, False).profile_tokens == 0
    compacted = replace(policy, max_context_tokens=3_000)
    out = rewrite(RewriteRequest((), long, current, compacted,
                                 MemoryContext(profile="likes tea", profile_elsewhere=False)), TOK)
    assert out.history_kept < len(long) and out.profile_tokens > 0
