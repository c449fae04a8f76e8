"""The providers' documented 400 rules, as the fake upstream enforces them: what Anthropic's
Messages API and OpenAI's chat completions refuse, in their own wording, so a test through the
fake fails where a real provider would (gateway/upstream/fake.py, fake_messages.py).

Pure functions over a request body that already passed the fake's shape checks; the caller
counts the prompt's tokens (the fake's cl100k count) and names the context window.

Anthropic Messages (`anthropic_problem`, the first rule broken):
- at least one message, and the first is the user's;
- every message has content (the final assistant message may be empty); text blocks (in
  `system`, in messages, inside `tool_result`) hold non-whitespace text, and `cache_control`
  is never on an empty one;
- consecutive messages of one role count as one turn, as Anthropic combines them. Every
  `tool_result` answers a `tool_use` id of the turn just before; every `tool_use` of an
  assistant turn that is not the last is answered in the next turn, whose `tool_result` blocks
  come first (text and images after them);
- a `thinking` block carries the `signature` the fake issues for its text (`signature`);
  `redacted_thinking` carries a string `data`;
- with `thinking: {"type": "enabled"}`, an assistant turn whose tool calls the final user turn
  answers (an open tool loop) starts with a `thinking` or `redacted_thinking` block;
- at most 4 blocks with `cache_control` over `tools`, `system` and messages;
- the prompt fits the window (`ANTHROPIC_WINDOW` unless the model says less).

OpenAI chat (`openai_problem`):
- a `tool` message answers a call of the assistant message with `tool_calls` just before it
  (directly or after sibling `tool` messages);
- every such call is answered before the next message that is not a `tool` message;
- the prompt fits the window (`OPENAI_WINDOW` unless the model says less), else
  `context_length_exceeded`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

ANTHROPIC_WINDOW = 200_000
OPENAI_WINDOW = 128_000
MAX_CACHE_BREAKPOINTS = 4
_SIGNING_KEY = b"context-gateway-fake thinking"
_THINKING_DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"


def signature(thinking: str) -> str:
    """The signature the fake issues for a thinking block's text (HMAC-SHA256 under a fixed
    key, base64): deterministic, so tests can build valid blocks, and any change to the text
    or the signature is caught."""
    digest = hmac.new(_SIGNING_KEY, thinking.encode("utf-8", "surrogatepass"),
                      hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


# --- Anthropic Messages ----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Turn:
    """Consecutive messages of one role, as Anthropic combines them: its blocks with their
    paths (`messages.<i>.content.<j>`), a string content as one text block."""
    role: str
    first: int
    blocks: tuple[tuple[str, Mapping[str, Any]], ...]


def anthropic_problem(body: Mapping[str, Any], tokens: int, window: int) -> str | None:
    """Anthropic's 400 message for the first rule `body` breaks, or None. `body` passed
    fake_messages.request_problem (messages are user/assistant objects with string or block
    content); `tokens` is the prompt's count."""
    messages = body["messages"]
    if not messages:
        return "messages: at least one message is required"
    if messages[0]["role"] != "user":
        return 'messages.0.role: first message must use the "user" role'
    turns = _turns(messages)
    for check in (_contents(body), _tool_pairs(turns), _thinking_signatures(turns),
                  _open_loop_thinking(body, turns), _breakpoints(body)):
        if check is not None:
            return check
    if tokens > window:
        return f"prompt is too long: {tokens} tokens > {window} maximum"
    return None


def _turns(messages: list[Mapping[str, Any]]) -> list[_Turn]:
    turns: list[_Turn] = []
    for i, message in enumerate(messages):
        content = message["content"]
        blocks = ((f"messages.{i}.content.0", {"type": "text", "text": content}),) \
            if isinstance(content, str) \
            else tuple((f"messages.{i}.content.{j}", b) for j, b in enumerate(content))
        if turns and turns[-1].role == message["role"]:
            last = turns[-1]
            turns[-1] = _Turn(last.role, last.first, last.blocks + blocks)
        else:
            turns.append(_Turn(message["role"], i, blocks))
    return turns


def _contents(body: Mapping[str, Any]) -> str | None:
    messages = body["messages"]
    for i, message in enumerate(messages):
        content = message["content"]
        if not content and not (i == len(messages) - 1 and message["role"] == "assistant"):
            return (f"messages.{i}: all messages must have non-empty content except for the "
                    f"optional final assistant message")
    system = body.get("system")
    located = [(f"system.{j}", b) for j, b in enumerate(system)] \
        if isinstance(system, list) else []
    for i, message in enumerate(messages):
        if isinstance(message["content"], list):
            located += [(f"messages.{i}.content.{j}", b)
                        for j, b in enumerate(message["content"])]
    for path, block in _with_nested(located):
        problem = _text_problem(path, block)
        if problem is not None:
            return problem
    return None


def _with_nested(located: list[tuple[str, Any]]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """The blocks and, after each `tool_result`, the blocks of its content."""
    for path, block in located:
        if not isinstance(block, Mapping):
            continue
        yield path, block
        inner = block.get("content") if block.get("type") == "tool_result" else None
        if isinstance(inner, list):
            yield from ((f"{path}.content.{k}", b) for k, b in enumerate(inner)
                        if isinstance(b, Mapping))


def _text_problem(path: str, block: Mapping[str, Any]) -> str | None:
    if block.get("type") != "text":
        return None
    text = block.get("text")
    if not isinstance(text, str):
        return f"{path}.text: Field required"
    if not text and block.get("cache_control") is not None:
        return f"{path}.text: cache_control cannot be set for empty text blocks"
    if not text:
        return f"{path.split('.')[0]}: text content blocks must be non-empty"
    if not text.strip():
        return f"{path.split('.')[0]}: text content blocks must contain non-whitespace text"
    return None


def _tool_pairs(turns: list[_Turn]) -> str | None:
    for n, turn in enumerate(turns):
        before = turns[n - 1] if n else None
        uses = _ids(before, "tool_use", "id") if before and before.role == "assistant" else []
        if turn.role == "user":
            for path, block in turn.blocks:
                if block.get("type") == "tool_result" and block.get("tool_use_id") not in uses:
                    return (f"{path}: unexpected `tool_use_id` found in `tool_result` blocks: "
                            f"{block.get('tool_use_id')}. Each `tool_result` block must have "
                            f"a corresponding `tool_use` block in the previous message.")
            kinds = [block.get("type") for _, block in turn.blocks]
            leading = next((k for k, kind in enumerate(kinds) if kind != "tool_result"),
                           len(kinds))
            late = kinds[leading:].count("tool_result")
            if uses and late:
                return (f"messages.{turn.first}: Did not find {late} `tool_result` block(s) at "
                        f"the beginning of this message. Messages following `tool_use` blocks "
                        f"must begin with a matching number of `tool_result` blocks.")
        elif n + 1 < len(turns):
            answered = _ids(turns[n + 1], "tool_result", "tool_use_id")
            missing = [i for i in _ids(turn, "tool_use", "id") if i not in answered]
            if missing:
                return (f"messages.{turn.first}: `tool_use` ids were found without "
                        f"`tool_result` blocks immediately after: {', '.join(map(str, missing))}."
                        f" Each `tool_use` block must have a corresponding `tool_result` block "
                        f"in the next message.")
    return None


def _ids(turn: _Turn, kind: str, key: str) -> list[Any]:
    return [block.get(key) for _, block in turn.blocks if block.get("type") == kind]


def _thinking_signatures(turns: list[_Turn]) -> str | None:
    for turn in turns:
        for path, block in turn.blocks:
            if block.get("type") == "thinking":
                text, signed = block.get("thinking"), block.get("signature")
                if not isinstance(text, str):
                    return f"{path}.thinking: Field required"
                if not isinstance(signed, str) or not hmac.compare_digest(signed,
                                                                          signature(text)):
                    return f"{path}: Invalid `signature` in `thinking` block"
            elif block.get("type") == "redacted_thinking" \
                    and not isinstance(block.get("data"), str):
                return f"{path}.data: Field required"
    return None


def _open_loop_thinking(body: Mapping[str, Any], turns: list[_Turn]) -> str | None:
    thinking = body.get("thinking")
    if not (isinstance(thinking, Mapping) and thinking.get("type") == "enabled"):
        return None
    if len(turns) < 2 or turns[-1].role != "user" \
            or not _ids(turns[-1], "tool_result", "tool_use_id"):
        return None
    path, first = turns[-2].blocks[0]
    if first.get("type") in ("thinking", "redacted_thinking"):
        return None
    return (f"{path}.type: Expected `thinking` or `redacted_thinking`, but found "
            f"`{first.get('type')}`. When `thinking` is enabled, a final `assistant` message "
            f"must start with a thinking block (preceeding the lastmost set of `tool_use` and "
            f"`tool_result` blocks). We recommend you include thinking blocks from previous "
            f"turns. To avoid this requirement, disable `thinking`. Please consult our "
            f"documentation at {_THINKING_DOCS}")


def _breakpoints(body: Mapping[str, Any]) -> str | None:
    located: list[tuple[str, Any]] = []
    for field in ("tools", "system"):
        if isinstance(body.get(field), list):
            located += [(field, b) for b in body[field]]
    for message in body["messages"]:
        if isinstance(message["content"], list):
            located += [("messages", b) for b in message["content"]]
    found = sum(1 for _, block in _with_nested(located)
                if block.get("cache_control") is not None)
    if found > MAX_CACHE_BREAKPOINTS:
        return (f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be "
                f"provided. Found {found}.")
    return None


# --- OpenAI chat -----------------------------------------------------------------------------

def openai_problem(body: Mapping[str, Any], tokens: int, window: int
                   ) -> tuple[str, str, str | None] | None:
    """(message, param, code) of OpenAI's 400 for the first rule `body` breaks, or None.
    `body` passed fake.request_problem; `tokens` is the prompt's count."""
    calls: list[Any] = []  # the ids of the open assistant message's tool_calls
    unanswered: list[Any] = []
    opened_at = 0
    for i, message in enumerate(body.get("messages") or []):
        if not isinstance(message, Mapping):
            continue
        if message.get("role") == "tool":
            if message.get("tool_call_id") not in calls:
                return ("Invalid parameter: messages with role 'tool' must be a response to a "
                        "preceeding message with 'tool_calls'.", f"messages.[{i}].role", None)
            unanswered = [c for c in unanswered if c != message.get("tool_call_id")]
            continue
        if unanswered:
            return _unanswered(unanswered, opened_at)
        tool_calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        calls = [c.get("id") for c in tool_calls if isinstance(c, Mapping)] \
            if isinstance(tool_calls, list) else []
        unanswered, opened_at = list(calls), i
    if unanswered:
        return _unanswered(unanswered, opened_at)
    if tokens > window:
        return (f"This model's maximum context length is {window} tokens. However, your "
                f"messages resulted in {tokens} tokens. Please reduce the length of the "
                f"messages.", "messages", "context_length_exceeded")
    return None


def _unanswered(ids: list[Any], at: int) -> tuple[str, str, None]:
    return ("An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'. The following tool_call_ids did not have "
            f"response messages: {', '.join(map(str, ids))}", f"messages.[{at}].role", None)
