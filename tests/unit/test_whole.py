"""Whether a history goes whole is known before recall (gateway/core/context/whole.py): the
pipeline leaves the conversation's own turns out of recall on that answer, so it must be the
rewrite's own, over random requests (tool loops, pins, memory, windows beyond the budget)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from gateway.core.context.blocks import BLOCK_ROLE, MemoryContext, PinnedMessage
from gateway.core.context.rewrite import RewriteRequest, rewrite
from gateway.core.context.whole import goes_whole
from gateway.core.messages import Message
from gateway.core.policy import ContextPolicy
from gateway.core.text.tokens import count_each, count_message, count_messages
from tests.unit.test_rewrite_properties import (FAST, WORDS, assert_reached, pinned_requests,
                                                reach, requests, word_texts)


@st.composite
def windowed(draw, request: st.SearchStrategy[RewriteRequest]) -> RewriteRequest:
    """`request` with, half the time, a window beyond its budget (the shipped shape: the
    history goes whole up to the window, is compacted to the budget beyond it), and with or
    without the history's costs brought along."""
    r = draw(request)
    if draw(st.booleans()):
        budget = r.policy.max_context_tokens
        window = budget + draw(st.integers(0, 3 * budget + 40))
        r = replace(r, policy=replace(r.policy, max_context_tokens=window,
                                      compact_to_tokens=max(1, budget)))
    if draw(st.booleans()):
        r = replace(r, history_costs=count_each(r.history, WORDS))
    return r


def test_goes_whole_is_the_rewrites_decision_and_recall_does_not_change_it():
    reached: Counter[str] = Counter()

    @FAST
    @given(windowed(st.one_of(requests(word_texts, WORDS), pinned_requests(word_texts, WORDS))))
    def run(request):
        whole = goes_whole(request, WORDS)
        assert whole == rewrite(request, WORDS).whole
        unrecalled = replace(request, memory=replace(request.memory, recalled=()))
        assert goes_whole(unrecalled, WORDS) == whole
        assert rewrite(unrecalled, WORDS).whole == whole
        reach(reached, "whole" if whole else "not whole")

    run()
    assert_reached(reached, "whole", "not whole")


def test_a_brief_within_the_reserve_leaves_a_whole_history_whole():
    reached: Counter[str] = Counter()

    @FAST
    @given(requests(word_texts, WORDS), word_texts, st.integers(0, 30), st.integers(-5, 60),
           st.booleans())
    def run(request, text, spare, slack, beyond):
        plain = replace(request, memory=replace(request.memory, pinned=(), brief=None,
                                                brief_tokens=0))
        brief = Message.of(BLOCK_ROLE, text)
        cost = count_message(brief, WORDS)
        # A window at the edge of what the history needs, so the brief's tokens decide.
        needed = count_messages(plain.instructions + plain.history + plain.current, WORDS)
        window = plain.policy.reserve_completion_tokens + needed + slack
        plain = replace(plain, policy=replace(
            plain.policy, max_context_tokens=max(1, window),
            compact_to_tokens=max(1, window // 3) if beyond else 0))
        briefed = replace(plain, memory=replace(plain.memory, brief=brief, brief_tokens=cost))
        if goes_whole(plain, WORDS, reserve=cost + spare):
            assert rewrite(briefed, WORDS).whole
            assert goes_whole(briefed, WORDS)
            reach(reached, "whole with the reserve")
        elif goes_whole(plain, WORDS):
            reach(reached, "whole without the brief only")
        else:
            reach(reached, "not whole")

    run()
    assert_reached(reached, "whole with the reserve", "whole without the brief only",
                   "not whole")


def test_pins_and_a_reserve_are_not_decided_before_the_brief():
    history = (Message.of("user", "a b"), Message.of("assistant", "c d"))
    pin = PinnedMessage("p1", Message.of("user", "pinned words"), "client", 0.0)
    request = RewriteRequest((), history, (Message.of("user", "e"),),
                             ContextPolicy(max_context_tokens=10_000, compact_to_tokens=0),
                             MemoryContext(pinned=(pin,)), ("1", "2"))
    assert goes_whole(request, WORDS) and rewrite(request, WORDS).whole
    assert not goes_whole(request, WORDS, reserve=1)
