"""Agent tool loops beyond the window (gateway/core/context/tool_loop.py and the rewrite's
loop layout): the exchange never splits, the task and the newest exchange are kept whole, old
results are cleared before old steps are dropped, and the points move only in steps.

Budgets are worked out with a word tokenizer (one token per whitespace-separated word)."""

from __future__ import annotations

import re

from hypothesis import assume, given, settings, strategies as st

from gateway.core.context.rewrite import Rewrite, RewriteRequest, rewrite, split_current
from gateway.core.context.tool_loop import (PLACEHOLDER, attached, cleared_exchange,
                                            exchanges, instruction_text, is_tool_loop)
from gateway.core.messages import Message
from gateway.core.policy import ContextPolicy
from gateway.core.text.tokens import count_messages


class WordTokenizer:
    def count(self, text: str) -> int:
        return len(text.split())

    def truncate(self, text: str, max_tokens: int) -> str:
        words = list(re.finditer(r"\S+", text))
        return text if len(words) <= max_tokens else text[:words[max_tokens - 1].end()]


TOK = WordTokenizer()
SYSTEM = Message.of("system", "You are a coding agent.")
TASK = Message.of("user", "Find and fix the flaky test in the payments suite.")
THINKING = {"type": "thinking", "thinking": "I should look", "signature": "sig-1"}


def call(step: int) -> Message:
    return Message.of("assistant", f"step {step}", thinking_blocks=[dict(THINKING)],
                      tool_calls=[{"id": f"c{step}", "type": "function",
                                   "function": {"name": "Read", "arguments": "{}"}}])


def result(step: int, size: int) -> Message:
    return Message.of("tool", " ".join(f"r{step}x{i}" for i in range(size)),
                      tool_call_id=f"c{step}")


def reminder(step: int) -> Message:
    return Message.of("user", f"<system-reminder>todo list {step}</system-reminder>")


INSTRUCTION = Message.of("user", "Also keep the old API working.")


def session(sizes: list[int], reminders: bool = True,
            instruction_at: int | None = None) -> tuple[Message, ...]:
    """The task, then a step per size (a call, its result, a reminder after every other);
    before step `instruction_at` the loop ends with an answer and the user instructs again."""
    out: list[Message] = [TASK]
    for step, size in enumerate(sizes):
        if step == instruction_at:
            out += [Message.of("assistant", "Fixed: the retry test races the clock."),
                    INSTRUCTION]
        out += [call(step), result(step, size)]
        if reminders and step % 2:
            out.append(reminder(step))
    return tuple(out)


def policy(window: int, compact: int) -> ContextPolicy:
    return ContextPolicy(max_context_tokens=window, compact_to_tokens=compact,
                         reserve_completion_tokens=0)


def run(conversation: tuple[Message, ...], window: int = 3_000,
        compact: int = 1_000) -> Rewrite:
    history, current = split_current(conversation)
    return rewrite(RewriteRequest(instructions=(SYSTEM,), history=history, current=current,
                                  policy=policy(window, compact)), TOK)


def valid_for_providers(messages: tuple[Message, ...]) -> None:
    """The rules both providers enforce on a tool loop: the conversation starts with a user
    message, every result answers a call of the assistant message just before its run of
    results, and every call is answered before the next assistant message."""
    turns = [m for m in messages if m.role != "system"]
    assert turns[0].role == "user"
    pending: set[str] = set()
    for m in turns:
        if m.role == "tool":
            assert m.get("tool_call_id") in pending, m
            pending.discard(m.get("tool_call_id"))
        else:
            if m.role == "assistant":
                assert not pending, f"unanswered calls {pending}"
                pending = {c["id"] for c in m.get("tool_calls") or []}
            elif pending:  # text after results: allowed once every call is answered
                assert not pending, f"unanswered calls {pending}"


def test_reminders_after_results_belong_to_their_step():
    conversation = session([5, 5, 5])
    assert [(a, b) for a, b in exchanges(conversation)] == [(0, 1), (1, 3), (3, 6), (6, 8)]
    assert attached(conversation)[5]
    assert instruction_text(conversation) == TASK.text


def test_a_loop_that_fits_the_window_goes_whole():
    conversation = session([50] * 5)
    out = run(conversation, window=5_000)
    assert out.messages == (SYSTEM, *conversation)
    assert out.tool_results_cleared == 0 and not out.over_budget


def test_beyond_the_window_old_results_are_cleared_and_the_task_and_newest_step_kept():
    conversation = session([400] * 12)
    out = run(conversation)
    budget = policy(3_000, 1_000).whole_prompt_budget
    assert out.tokens_forwarded == count_messages(out.messages, TOK) <= budget
    assert out.messages[:2] == (SYSTEM, TASK)
    newest = conversation[-3:] if conversation[-1].role == "user" else conversation[-2:]
    assert out.messages[-len(newest):] == newest
    assert all(a is b for a, b in zip(out.messages[-len(newest):], newest))
    assert out.tool_results_cleared > 0
    originals = {m.get("tool_call_id"): m for m in conversation if m.role == "tool"}
    cleared = [m for m in out.messages if m.role == "tool" and m not in conversation]
    assert len(cleared) == out.tool_results_cleared
    for m in cleared:
        call_id = m.get("tool_call_id")
        assert m.text == PLACEHOLDER.format(name="Read", id=call_id,
                                            size=len(originals[call_id].text))
    valid_for_providers(out.messages)


def test_cleared_steps_lose_their_thinking_and_reminders_verbatim_steps_keep_them():
    cleared = cleared_exchange((call(1), result(1, 10), reminder(1)))
    assert len(cleared) == 2 and cleared[0].get("thinking_blocks") is None
    assert cleared[0].get("tool_calls") == call(1).get("tool_calls")
    out = run(session([400] * 12))
    verbatim = [m for m in out.messages if m.role == "assistant" and m.get("thinking_blocks")]
    assert verbatim and all(m.get("thinking_blocks") == [THINKING] for m in verbatim)


def test_a_later_instruction_is_kept_when_its_steps_are_dropped():
    conversation = session([300] * 40, instruction_at=3)
    out = run(conversation)
    assert out.exchanges_dropped > 0
    assert INSTRUCTION in out.messages
    assert out.messages[1] == TASK
    valid_for_providers(out.messages)


def test_what_the_user_typed_with_results_outlives_its_step_and_reminders_do_not():
    typed = Message.of("user", [
        {"type": "text", "text": "<system-reminder>\nfiles changed\n</system-reminder>"},
        {"type": "text", "text": "Also keep the old API working."}])
    steps = list(session([300] * 30))
    at = steps.index(result(3, 300)) + 1
    conversation = (*steps[:at], typed, *steps[at:])
    out = run(conversation)
    assert out.exchanges_dropped > 3 and result(3, 300) not in out.messages
    assert INSTRUCTION in out.messages  # its text alone, the reminder part left out
    assert not any("todo list 1<" in m.text for m in out.messages)  # a dropped step's reminder
    valid_for_providers(out.messages)


def test_a_newest_exchange_larger_than_the_window_goes_whole_with_the_task():
    conversation = session([100, 100, 5_000], reminders=False)
    out = run(conversation)
    assert out.over_budget
    assert out.messages == (SYSTEM, TASK, *conversation[-2:])


def test_the_prefix_stays_put_between_steps():
    """Consecutive requests of a growing loop repeat the previous prompt's stable prefix,
    except where a point jumps — at most one request in a few."""
    sizes = [150] * 60
    prompts = [run(session(sizes[:n])) for n in range(20, 60)]
    kept = 0
    for before, after in zip(prompts, prompts[1:]):
        stable = before.messages[:before.stable_messages]
        kept += after.messages[:len(stable)] == stable
    assert kept >= 2 / 3 * (len(prompts) - 1)


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 900), min_size=1, max_size=30),
       reminders=st.booleans(), window=st.integers(600, 4_000),
       instruction_at=st.none() | st.integers(0, 29))
def test_any_loop_is_valid_for_the_provider_and_fits_when_its_newest_exchange_does(
        sizes, reminders, window, instruction_at):
    conversation = session(sizes, reminders, instruction_at)
    history, current = split_current(conversation)
    assume(is_tool_loop(history, current))
    out = run(conversation, window=window, compact=window // 3)
    valid_for_providers(out.messages)
    assert out.messages[1] == TASK  # the task is always forwarded
    assert out.messages[-len(current):] == current  # the newest exchange, whole
    if not out.over_budget:
        assert count_messages(out.messages, TOK) <= policy(window, 0).whole_prompt_budget
    else:
        assert count_messages((SYSTEM, TASK, *current), TOK) > \
            policy(window, 0).whole_prompt_budget
