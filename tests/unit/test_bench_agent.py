"""bench/agent: the session generator is deterministic and shaped like Claude Code's loop, and
the measures of a forwarded request (tokens, task, newest results, breakpoints, cost) read it
as intended."""

from __future__ import annotations

import pytest

from bench.agent import measure
from bench.agent.cost import RULE_NAMES, priced, step_cost
from bench.agent.report import summary
from bench.agent.drive import Step
from bench.agent.sessions import (INSTRUCTION, INSTRUCTION_STEP, MAX_RESULT_TOKENS,
                                  MIN_RESULT_TOKENS, TASK, AgentSession, reminder,
                                  system_prompt, tool_result_text)
from bench.locomo.meter import PromptMeter
from gateway.tokenizer import CL100K, tokenizer_for_encoding


@pytest.fixture(scope="module")
def meter() -> PromptMeter:
    return PromptMeter()


def _claude_reply(step: int) -> dict:
    return {"content": [{"type": "thinking", "thinking": f"think {step}", "signature": "sig"},
                        {"type": "tool_use", "id": f"toolu_{step}", "name": "Read",
                         "input": {"step": step}}]}


def _chat_reply(step: int) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{step}", "type": "function",
         "function": {"name": "Read", "arguments": f'{{"step": {step}}}'}}]}


def _played(dialect: str, steps: int) -> AgentSession:
    session = AgentSession(dialect)
    for k in range(steps):
        session.answer(_claude_reply(k) if dialect == "anthropic" else _chat_reply(k))
    return session


def test_tool_results_are_deterministic_and_2k_to_20k_tokens():
    count = tokenizer_for_encoding(CL100K).count
    sizes = [count(tool_result_text(k)) for k in range(12)]
    assert all(0.9 * MIN_RESULT_TOKENS <= n <= MAX_RESULT_TOKENS for n in sizes), sizes
    assert max(sizes) - min(sizes) > 8000  # varied, not one size
    assert tool_result_text(4) == tool_result_text.__wrapped__(4)


def test_system_prompt_is_two_to_three_thousand_tokens():
    assert 2000 <= tokenizer_for_encoding(CL100K).count(system_prompt()) <= 3000


def test_anthropic_request_is_claude_code_shaped():
    session = _played("anthropic", 3)
    body = session.request()
    assert body["thinking"]["type"] == "enabled"
    assert [t["name"] for t in body["tools"]] == ["Read", "Bash", "Edit", "Grep"]
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    first, *rest = body["messages"]
    assert first["content"][0]["text"] == TASK
    assert first["content"][1]["text"].startswith("<system-reminder>")
    assert [m["role"] for m in rest] == ["assistant", "user"] * 3
    assert rest[0]["content"][0]["signature"] == "sig"  # the reply verbatim
    newest = rest[-1]["content"]
    assert measure.strip_cache_control(newest[0]) == {
        "type": "tool_result", "tool_use_id": "toolu_2", "content": tool_result_text(2)}
    # The client's breakpoint is on the newest message's last block only (moved each turn).
    marked = [i for i, m in enumerate(body["messages"])
              if any("cache_control" in b for b in m["content"])]
    assert marked == [len(body["messages"]) - 1]
    assert measure.breakpoints("anthropic", body)[:2] == (2, 1)


def test_reminders_follow_the_results_on_some_steps_and_the_instruction_at_its_step():
    session = _played("anthropic", INSTRUCTION_STEP + 1)
    users = [m for m in session.history if m["role"] == "user"][1:]
    with_reminder = [k for k, m in enumerate(users)
                     if any(b.get("text", "").startswith("<system-reminder>")
                            for b in m["content"])]
    assert with_reminder == [k for k in range(len(users)) if reminder(k)]
    assert 0 < len(with_reminder) < len(users)
    instructed = users[INSTRUCTION_STEP - 1]["content"]
    assert instructed[0]["type"] == "tool_result" and instructed[-1]["text"] == INSTRUCTION
    assert session.instructed


def test_chat_form_uses_tool_calls_and_tool_messages():
    session = _played("chat", INSTRUCTION_STEP)
    body = session.request()
    roles = [m["role"] for m in body["messages"]]
    assert roles[:4] == ["system", "user", "assistant", "tool"]
    assert roles[-3:] == ["assistant", "tool", "user"]
    assert body["messages"][-1]["content"] == INSTRUCTION
    assert body["messages"][-2] == {"role": "tool", "tool_call_id": f"call_{INSTRUCTION_STEP - 1}",
                                    "content": tool_result_text(INSTRUCTION_STEP - 1)}
    assert session.results == [(f"call_{INSTRUCTION_STEP - 1}",
                                tool_result_text(INSTRUCTION_STEP - 1))]


def test_request_never_exposes_the_session_history():
    session = _played("anthropic", 1)
    body = session.request()
    body["messages"][-1]["content"].clear()
    assert session.history[-1]["content"]


def test_results_whole_needs_the_same_id_and_content():
    session = _played("chat", 2)
    body = session.request()
    assert measure.results_whole("chat", body, session.results)
    cut = {**body, "messages": [{**m, "content": "short […]"} if m.get("tool_call_id") == "call_1"
                                else m for m in body["messages"]]}
    assert not measure.results_whole("chat", cut, session.results)


def test_task_is_found_in_any_text_and_essential_keeps_task_and_newest_exchange(meter):
    session = _played("anthropic", 4)
    body = session.request()
    assert measure.text_kept(body, TASK)
    small = measure.essential("anthropic", body, TASK, [])
    assert small["messages"] == [body["messages"][0], *body["messages"][-2:]]
    assert measure.essential_tokens("anthropic", body, TASK, [], meter) < \
        measure.gateway_tokens("anthropic", body, meter)


def test_units_ignore_cache_control(meter):
    session = _played("anthropic", 2)
    one, two = session.request(), session.request()
    for m in two["messages"]:
        for b in m["content"]:
            b.pop("cache_control", None)
    assert measure.units("anthropic", one) == measure.units("anthropic", two)


def test_resending_a_grown_history_costs_less_than_it_is_long(meter):
    session = _played("chat", 2)
    first = priced(meter, measure.units("chat", session.request()), None)
    session.answer(_chat_reply(2))
    second = priced(meter, measure.units("chat", session.request()), None)
    cost = step_cost(meter, first, second)
    tokens = sum(len(meter.rendered(u)) for u in second.units)
    assert set(cost) == set(RULE_NAMES)
    assert all(0 < c < tokens for c in cost.values())
    unmarked = priced(meter, second.units, [])
    assert step_cost(meter, priced(meter, first.units, []), unmarked)["anthropic"] == tokens


def test_summary_counts_the_broken_targets():
    ok = Step(0, 200, forwarded_count=1, original_tokens=40_000, forwarded_tokens=9_000,
              essential_tokens=5_000, budget=15_000, task_kept=True, results_whole=True,
              breakpoints=2, breakpoints_in_messages=1, reuse=0.9)
    bad = Step(1, 400, "400: first message must use the 'user' role", forwarded_count=1,
               upstream_status=400, original_tokens=40_000, forwarded_tokens=40_000,
               essential_tokens=5_000, budget=15_000, task_kept=False, results_whole=False)
    s = summary([ok, bad])
    assert (s["rejected"], s["upstream_rejected"], s["task_missing"], s["newest_result_cut"],
            s["over_budget_newest_fits"], s["past_twice_not_compacted"],
            s["no_breakpoint_in_messages"]) == (1, 1, 1, 1, 1, 1, 1)
    assert s["prefix_reuse"] == 0.9
