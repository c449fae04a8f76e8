"""A deterministic Claude Code-like agent session, as its client would send it, in two dialects.

- `anthropic` (Messages): a system prompt of about 2.5k tokens with `cache_control`; tools
  Read, Bash, Edit, Grep; `thinking` enabled; the task as the first user message (the task's
  text block, then a `<system-reminder>` block). After each reply the client appends the
  assistant's content verbatim (thinking blocks and signatures included) and a user message of
  one `tool_result` per `tool_use`, followed on some steps by a `<system-reminder>` text block
  and at `INSTRUCTION_STEP` by a user instruction that is not a tool result. The client's own
  breakpoints: the system prompt and the last block of the newest message (moved each turn).
- `chat` (OpenAI chat completions): the same with a system message, `tool_calls` and `tool`
  messages; the reminders and the instruction are user messages after the tool messages.

Stateless: every request carries the whole history. Request k (0-based) follows k tool results;
result k is 2-20k cl100k tokens of file listings, code or test logs, its size and text fixed
by k. Nothing here does I/O: the driver (drive.py) sends `request()` and feeds the reply back
with `answer()`.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from gateway.tokenizer import CL100K, tokenizer_for_encoding

DIALECTS = ("anthropic", "chat")
TASK = ("Find and fix the flaky test in tests/test_scheduler.py: "
        "test_retry_backoff_is_bounded fails about one run in twenty on CI.")
INSTRUCTION = "Also keep the old API working."
INSTRUCTION_STEP = 25
"""The request before which the user adds INSTRUCTION (with that step's tool results)."""
MIN_RESULT_TOKENS, MAX_RESULT_TOKENS = 2000, 20000
MAX_TOKENS = 4096
THINKING = {"type": "enabled", "budget_tokens": 2048}
EPHEMERAL = {"type": "ephemeral"}
_TOOLS = (
    ("Read", "Reads a file from the local filesystem.",
     {"file_path": {"type": "string"}, "offset": {"type": "integer"}}),
    ("Bash", "Executes a bash command in a persistent shell session.",
     {"command": {"type": "string"}, "timeout": {"type": "integer"}}),
    ("Edit", "Performs exact string replacements in files.",
     {"file_path": {"type": "string"}, "old_string": {"type": "string"},
      "new_string": {"type": "string"}}),
    ("Grep", "A search tool built on ripgrep.",
     {"pattern": {"type": "string"}, "path": {"type": "string"}}),
)


def anthropic_tools() -> list[dict[str, Any]]:
    return [{"name": n, "description": d,
             "input_schema": {"type": "object", "properties": p, "required": [next(iter(p))]}}
            for n, d, p in _TOOLS]


def chat_tools() -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                              "parameters": t["input_schema"]}}
            for t in anthropic_tools()]


@lru_cache(maxsize=1)
def system_prompt() -> str:
    """About 2.5k tokens of agent instructions (the same every time)."""
    rules = ["Read a file before you edit it.", "Prefer Grep over Bash for searching.",
             "Run the tests after every change.", "Never commit unless the user asks.",
             "Keep answers short; show the command you ran.", "Quote paths exactly.",
             "Do not add comments that restate the code.", "Explain a risky change first."]
    parts = ["You are an interactive CLI agent that helps users with software engineering "
             "tasks. Use the instructions below and the tools available to you."]
    for i in range(60):
        parts.append(f"# Rule {i + 1}\n{rules[i % len(rules)]} This applies to every file in "
                     f"the repository, section {i % 7}, and to each tool call you make; when in "
                     f"doubt, ask the user before acting.")
    return "\n\n".join(parts)


def result_tokens(step: int) -> int:
    """The target size of tool result `step`, in cl100k tokens (2k-20k, varied)."""
    span = MAX_RESULT_TOKENS - MIN_RESULT_TOKENS
    return MIN_RESULT_TOKENS + (step * 7919 + 3001) % (span + 1)


@lru_cache(maxsize=256)
def tool_result_text(step: int) -> str:
    """Tool result `step`: a file listing, source code or a test log of about
    `result_tokens(step)` tokens (lines are counted apart), the same on every call."""
    rng = random.Random(f"agent-result-{step}")
    line = (_listing_line, _code_line, _log_line)[step % 3]
    count = tokenizer_for_encoding(CL100K).count
    target = result_tokens(step)
    lines: list[str] = []
    used = 0
    while used < target:
        text = line(rng, len(lines))
        lines.append(text)
        used += count(text) + 1
    return "\n".join(lines)


def reminder(step: int) -> str | None:
    """The `<system-reminder>` the client adds after tool result `step`, on some steps."""
    if step % 3 != 1:
        return None
    return (f"<system-reminder>\nThe todo list has {step % 5 + 2} items; mark them done as you "
            f"go. This reminder is not from the user.\n</system-reminder>")


_WORDS = ("scheduler", "retry", "backoff", "queue", "worker", "clock", "jitter", "bound",
          "timeout", "task", "result", "config", "state", "event", "lease", "delay")


def _listing_line(rng: random.Random, i: int) -> str:
    name = "_".join(rng.choice(_WORDS) for _ in range(2))
    return (f"-rw-r--r--  1 dev dev {rng.randint(120, 98000):>6} Nov {rng.randint(1, 28):>2} "
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d} src/{rng.choice(_WORDS)}/"
            f"{name}_{i}.py")


def _code_line(rng: random.Random, i: int) -> str:
    a, b = rng.choice(_WORDS), rng.choice(_WORDS)
    forms = (f"def {a}_{b}_{i}(self, {b}: int = {rng.randint(0, 99)}) -> int:",
             f"    return self.{a} * {rng.randint(2, 9)} + {b}  # {a} {b}",
             f"    if {a} > {rng.randint(1, 500)}:",
             f"        raise ValueError(\"{a} out of range: {{{a}}}\")",
             f"class {a.title()}{b.title()}{i}({rng.choice(_WORDS).title()}Base):")
    return forms[i % len(forms)]


def _log_line(rng: random.Random, i: int) -> str:
    outcome = "PASSED" if rng.random() > 0.05 else "FAILED"
    return (f"tests/test_{rng.choice(_WORDS)}.py::test_{rng.choice(_WORDS)}_{rng.choice(_WORDS)}"
            f"_{i} {outcome} [{rng.randint(0, 100):>3}%] ({rng.randint(1, 999)} ms)")


@dataclass
class AgentSession:
    """One client's history in `dialect`; `request()` is the next request's body (SDK keyword
    arguments, `model` included), `answer(reply)` appends the reply and the client's next
    user turn. Steps are counted by requests sent."""

    dialect: str
    model: str = "agent"
    history: list[dict[str, Any]] = field(default_factory=list)
    step: int = 0
    results: list[tuple[str, Any]] = field(default_factory=list)
    """(tool id, content) of the newest tool results, as the client sent them."""

    def __post_init__(self) -> None:
        if self.dialect not in DIALECTS:
            raise ValueError(f"unknown dialect {self.dialect!r}; expected one of {DIALECTS}")
        if not self.history:
            first = {"type": "text", "text": TASK}
            remind = {"type": "text", "text": _opening_reminder()}
            if self.dialect == "anthropic":
                self.history.append({"role": "user", "content": [first, remind]})
            else:
                self.history += [{"role": "system", "content": system_prompt()},
                                 {"role": "user", "content": [first, remind]}]

    @property
    def instructed(self) -> bool:
        """Whether the history holds INSTRUCTION yet."""
        return self.step >= INSTRUCTION_STEP

    def request(self) -> dict[str, Any]:
        """The whole history as the client sends it now (a new object every call)."""
        messages = copy.deepcopy(self.history)
        if self.dialect == "chat":
            return {"model": self.model, "messages": messages, "tools": chat_tools()}
        last = messages[-1]["content"]
        last[-1] = {**last[-1], "cache_control": EPHEMERAL}
        return {"model": self.model, "max_tokens": MAX_TOKENS, "thinking": THINKING,
                "system": [{"type": "text", "text": system_prompt(),
                            "cache_control": EPHEMERAL}],
                "tools": anthropic_tools(), "messages": messages}

    def answer(self, reply: dict[str, Any]) -> None:
        """Append the assistant's `reply` verbatim (Anthropic: the message's `content` blocks
        as dicts; chat: the assistant message dict) and the tool results for its calls."""
        step = self.step
        if self.dialect == "anthropic":
            calls = [b["id"] for b in reply["content"] if b.get("type") == "tool_use"]
            self.history.append({"role": "assistant", "content": copy.deepcopy(reply["content"])})
        else:
            calls = [c["id"] for c in reply.get("tool_calls") or []]
            self.history.append(copy.deepcopy(reply))
        if not calls:
            raise ValueError(f"step {step}: the agent's reply calls no tool: {reply!r}")
        self.results = [(call, tool_result_text(step) if i == 0 else f"ok ({call})")
                        for i, call in enumerate(calls)]
        texts = [t for t in (reminder(step),
                             INSTRUCTION if step + 1 == INSTRUCTION_STEP else None) if t]
        if self.dialect == "anthropic":
            blocks: list[dict[str, Any]] = [
                {"type": "tool_result", "tool_use_id": call, "content": content}
                for call, content in self.results]
            blocks += [{"type": "text", "text": t} for t in texts]
            self.history.append({"role": "user", "content": blocks})
        else:
            self.history += [{"role": "tool", "tool_call_id": call, "content": content}
                             for call, content in self.results]
            self.history += [{"role": "user", "content": t} for t in texts]
        self.step += 1


def _opening_reminder() -> str:
    return ("<system-reminder>\nAs you answer the user's questions, you can use the following "
            "context: the repository is a Python 3.12 project tested with pytest; the working "
            "directory is /repo.\n</system-reminder>")
