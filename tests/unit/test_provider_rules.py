"""The providers' 400 rules the fake upstream enforces (gateway/upstream/provider_rules.py):
each rule lets a valid request pass and refuses a request that breaks it, in the provider's
wording."""

from __future__ import annotations

import pytest

from gateway.upstream.provider_rules import (ANTHROPIC_WINDOW, OPENAI_WINDOW, anthropic_problem,
                                             openai_problem, signature)

TASK = {"role": "user", "content": "Find and fix the flaky test."}
THOUGHT = "I should read the test first."


def thinking(text: str = THOUGHT) -> dict:
    return {"type": "thinking", "thinking": text, "signature": signature(text)}


def use(id_: str, *before: dict) -> dict:
    return {"role": "assistant", "content": [
        *before, {"type": "tool_use", "id": id_, "name": "read", "input": {"path": "t.py"}}]}


def result(id_: str, text: str = "def test(): ...") -> dict:
    return {"type": "tool_result", "tool_use_id": id_, "content": text}


def user(*blocks: dict) -> dict:
    return {"role": "user", "content": list(blocks)}


def reminder(text: str = "<system-reminder>Stay on task.</system-reminder>") -> dict:
    return {"type": "text", "text": text}


def anthropic(*messages: dict, tokens: int = 100, window: int = ANTHROPIC_WINDOW,
              **fields) -> str | None:
    return anthropic_problem({"model": "agent", "max_tokens": 64, "messages": list(messages),
                              **fields}, tokens, window)


LOOP = [TASK, use("t1", thinking()), user(result("t1"), reminder())]


# --- Anthropic: valid requests pass ----------------------------------------------------------

@pytest.mark.parametrize("messages, fields", [
    ([TASK], {}),
    (LOOP, {}),
    (LOOP, {"thinking": {"type": "enabled", "budget_tokens": 1024}}),
    ([TASK, use("t1"), user(result("t1")), {"role": "assistant", "content": "Fixed."},
      {"role": "user", "content": "Thanks, now the docs."}],
     {"thinking": {"type": "enabled", "budget_tokens": 1024}}),  # earlier turns: no thinking
    ([TASK, use("t1", {"type": "redacted_thinking", "data": "opaque"}), user(result("t1"))],
     {"thinking": {"type": "enabled", "budget_tokens": 1024}}),
    ([TASK, {"role": "assistant", "content": [{"type": "text", "text": "Let me look."}]},
      use("t1"), user(result("t1"))], {}),  # consecutive assistant messages are one turn
    ([TASK, use("t1"), user(result("t1")), user(reminder())], {}),
    ([TASK, {"role": "assistant", "content": ""}], {}),  # an empty final assistant prefill
    ([TASK, use("t1")], {}),  # the last message's tool_use is not yet answered
    ([user({**reminder(), "cache_control": {"type": "ephemeral"}})],
     {"system": [{"type": "text", "text": "You code.", "cache_control": {"type": "ephemeral"}}],
      "tools": [{"name": "read", "input_schema": {}, "cache_control": {"type": "ephemeral"}}]}),
])
def test_a_valid_anthropic_request_passes(messages, fields):
    assert anthropic(*messages, **fields) is None


# --- Anthropic: each rule, broken ------------------------------------------------------------

def test_no_messages_is_refused():
    assert anthropic() == "messages: at least one message is required"


def test_the_first_message_must_be_the_users():
    assert anthropic(use("t1"), user(result("t1"))) == \
        'messages.0.role: first message must use the "user" role'


def test_a_tool_result_must_answer_a_tool_use_of_the_previous_message():
    assert anthropic(TASK, {"role": "assistant", "content": "Reading."},
                     user(result("t9"))) == (
        "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: t9. "
        "Each `tool_result` block must have a corresponding `tool_use` block in the previous "
        "message.")
    # a result two messages after its call is not an answer either
    assert "unexpected `tool_use_id` found in `tool_result` blocks: t1" in anthropic(
        TASK, use("t1"), user(result("t1")), {"role": "assistant", "content": "Done."},
        user(result("t1")))


def test_a_tool_use_must_be_answered_in_the_next_message():
    assert anthropic(TASK, use("t1"), user(reminder())) == (
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately "
        "after: t1. Each `tool_use` block must have a corresponding `tool_result` block in the "
        "next message.")


def test_tool_results_come_before_text_in_a_user_message():
    assert anthropic(TASK, use("t1"), user(reminder(), result("t1"))) == (
        "messages.2: Did not find 1 `tool_result` block(s) at the beginning of this message. "
        "Messages following `tool_use` blocks must begin with a matching number of "
        "`tool_result` blocks.")
    # a separate user message before the results is combined with them: the same
    assert "Did not find 1 `tool_result` block(s)" in anthropic(
        TASK, use("t1"), user(reminder()), user(result("t1")))


@pytest.mark.parametrize("message, expected", [
    (user({"type": "text", "text": ""}), "messages: text content blocks must be non-empty"),
    (user({"type": "text", "text": " \n"}),
     "messages: text content blocks must contain non-whitespace text"),
    ({"role": "user", "content": []}, "messages.0: all messages must have non-empty content "
                                      "except for the optional final assistant message"),
    (user({"type": "text", "text": "", "cache_control": {"type": "ephemeral"}}),
     "messages.0.content.0.text: cache_control cannot be set for empty text blocks"),
])
def test_text_must_not_be_empty(message, expected):
    assert anthropic(message) == expected


def test_empty_text_inside_a_tool_result_or_the_system_prompt_is_refused():
    empty = {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text",
                                                                      "text": ""}]}
    assert anthropic(TASK, use("t1"), user(empty)) == \
        "messages: text content blocks must be non-empty"
    assert anthropic(TASK, system=[{"type": "text", "text": ""}]) == \
        "system: text content blocks must be non-empty"


def test_at_most_four_cache_control_blocks_over_tools_system_and_messages():
    mark = {"cache_control": {"type": "ephemeral"}}
    tools = [{"name": "read", "input_schema": {}, **mark}]
    system = [{"type": "text", "text": "You code.", **mark}]
    nested = {**result("t1"), "content": [{"type": "text", "text": "ok", **mark}]}
    messages = [user({**reminder(), **mark}), use("t1"), user({**nested, **mark})]
    assert anthropic(*messages, tools=tools, system=system) == \
        "A maximum of 4 blocks with cache_control may be provided. Found 5."
    assert anthropic(*messages, tools=tools) is None


@pytest.mark.parametrize("block", [
    {"type": "thinking", "thinking": THOUGHT, "signature": "sig-1"},
    {"type": "thinking", "thinking": THOUGHT + " Edited.", "signature": signature(THOUGHT)},
    {"type": "thinking", "thinking": THOUGHT},
])
def test_a_thinking_block_needs_the_signature_issued_for_its_text(block):
    assert anthropic(TASK, use("t1", block), user(result("t1"))) == \
        "messages.1.content.0: Invalid `signature` in `thinking` block"


def test_with_thinking_an_open_tool_loop_starts_with_a_thinking_block():
    problem = anthropic(TASK, use("t1"), user(result("t1"), reminder()),
                        thinking={"type": "enabled", "budget_tokens": 1024})
    assert problem.startswith(
        "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
        "`tool_use`. When `thinking` is enabled, a final `assistant` message must start with a "
        "thinking block")
    assert anthropic(TASK, use("t1"), user(result("t1"))) is None  # thinking not enabled


def test_a_prompt_over_the_window_is_too_long():
    assert anthropic(TASK, tokens=ANTHROPIC_WINDOW) is None
    assert anthropic(TASK, tokens=ANTHROPIC_WINDOW + 1) == \
        f"prompt is too long: {ANTHROPIC_WINDOW + 1} tokens > {ANTHROPIC_WINDOW} maximum"
    assert anthropic(TASK, tokens=16_001, window=16_000) == \
        "prompt is too long: 16001 tokens > 16000 maximum"


def test_signature_is_deterministic_and_text_bound():
    assert signature(THOUGHT) == signature(THOUGHT) != signature(THOUGHT + ".")
    assert signature("\ud800 lone surrogate")  # hostile text is signed, never a crash


# --- OpenAI chat -----------------------------------------------------------------------------

def calls(*ids: str) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": "read", "arguments": "{}"}}
        for i in ids]}


def tool(id_: str) -> dict:
    return {"role": "tool", "tool_call_id": id_, "content": "def test(): ..."}


def openai(*messages: dict, tokens: int = 100, window: int = OPENAI_WINDOW):
    return openai_problem({"messages": list(messages)}, tokens, window)


CHAT_TASK = {"role": "user", "content": "Find and fix the flaky test."}
TOOL_ORPHAN = ("Invalid parameter: messages with role 'tool' must be a response to a "
               "preceeding message with 'tool_calls'.")


@pytest.mark.parametrize("messages", [
    [CHAT_TASK],
    [{"role": "system", "content": "You code."}, CHAT_TASK, calls("c1", "c2"), tool("c2"),
     tool("c1"), {"role": "assistant", "content": "Fixed."}, {"role": "user", "content": "Ok"}],
    [CHAT_TASK, calls("c1"), tool("c1"), calls("c2"), tool("c2")],
])
def test_a_valid_chat_request_passes(messages):
    assert openai(*messages) is None


def test_a_tool_message_must_answer_the_preceding_tool_calls():
    assert openai(CHAT_TASK, tool("c1")) == (TOOL_ORPHAN, "messages.[1].role", None)
    assert openai(CHAT_TASK, calls("c1"), tool("c9")) == (TOOL_ORPHAN, "messages.[2].role",
                                                          None)
    # after a user message the earlier call is closed
    assert openai(CHAT_TASK, calls("c1"), tool("c1"), CHAT_TASK, tool("c1"))[0] == TOOL_ORPHAN


def test_every_tool_call_must_be_answered():
    expected = ("An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                "response messages: c2", "messages.[1].role", None)
    assert openai(CHAT_TASK, calls("c1", "c2"), tool("c1"), CHAT_TASK) == expected
    assert openai(CHAT_TASK, calls("c1", "c2"), tool("c1")) == expected


def test_a_prompt_over_the_window_is_context_length_exceeded():
    assert openai(CHAT_TASK, tokens=OPENAI_WINDOW) is None
    message, param, code = openai(CHAT_TASK, tokens=9_000, window=8_000)
    assert (param, code) == ("messages", "context_length_exceeded")
    assert message.startswith("This model's maximum context length is 8000 tokens. However, "
                              "your messages resulted in 9000 tokens.")
