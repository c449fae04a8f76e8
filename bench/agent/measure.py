"""What a forwarded agent request is, measured against the client's own request.

- `gateway_tokens`: the request's prompt tokens as the gateway counts them (cl100k, the
  internal message form: `PromptMeter.tokens`), system prompt included, tools not;
- `units`: the request as a provider's prompt cache sees it, one unit per system prompt and per
  message, `cache_control` left out (a moved breakpoint changes no token of the prompt); the
  unit is `{role, content}` with the message's JSON (sorted keys) as content, rendered by
  `PromptMeter.rendered`;
- `breakpoints`: how many `cache_control` marks the request carries (system, tools, messages)
  and the units they end (Anthropic caches the prefix up to a marked block);
- `task_kept`, `results_whole`: whether a text is present in the request, whether the newest
  tool results reached it byte for byte (same id, same content);
- `essential_tokens`: what must always be forwarded — the system prompt, the task and later
  user instructions, the newest assistant message and the client's messages after it.
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Mapping, Sequence

from bench.locomo.meter import PromptMeter
from gateway.core.dialects.anthropic import parse_messages_request

Body = Mapping[str, Any]


def strip_cache_control(value: Any) -> Any:
    """`value` without any `cache_control` key, at any depth (a new object)."""
    if isinstance(value, dict):
        return {k: strip_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [strip_cache_control(v) for v in value]
    return value


def _unit(role: str, value: Any) -> dict[str, str]:
    return {"role": role, "content": json.dumps(strip_cache_control(value), sort_keys=True,
                                                ensure_ascii=False)}


def units(dialect: str, body: Body) -> list[dict[str, str]]:
    if dialect == "anthropic":
        system = body.get("system")
        head = [_unit("system", system)] if system else []
        return head + [_unit(m["role"], m["content"]) for m in body["messages"]]
    return [_unit(m["role"], {k: v for k, v in m.items() if k != "role"})
            for m in body["messages"]]


def _marked(value: Any) -> int:
    if isinstance(value, dict):
        return ("cache_control" in value) + sum(_marked(v) for v in value.values())
    if isinstance(value, list):
        return sum(_marked(v) for v in value)
    return 0


def breakpoints(dialect: str, body: Body) -> tuple[int, int, list[int]]:
    """(marks in the whole request, marks inside `messages`, indexes into `units` of the
    units that carry one)."""
    if dialect != "anthropic":
        return 0, 0, []
    system = body.get("system")
    parts = ([system] if system else []) + [m.get("content") for m in body["messages"]]
    marked = [i for i, part in enumerate(parts) if _marked(part)]
    in_messages = sum(_marked(m) for m in body["messages"])
    return _marked(dict(body)), in_messages, marked


def gateway_tokens(dialect: str, body: Body, meter: PromptMeter) -> int:
    if dialect == "anthropic":
        messages = parse_messages_request(body, max_messages=10 ** 9).messages
        return meter.tokens([m.to_openai() for m in messages])
    return meter.tokens(list(body["messages"]))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def text_kept(body: Body, text: str) -> bool:
    """Whether some string of the request's system prompt or messages contains `text`."""
    return any(text in s for s in _strings([body.get("system"), body.get("messages")]))


def results_whole(dialect: str, body: Body, results: Sequence[tuple[str, Any]]) -> bool:
    """Whether every (tool id, content) of `results` is in the request unchanged."""
    found: dict[str, Any] = {}
    for m in body.get("messages") or []:
        if dialect == "chat" and m.get("role") == "tool":
            found[m.get("tool_call_id")] = m.get("content")
        elif dialect == "anthropic" and isinstance(m.get("content"), list):
            for b in m["content"]:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    found[b.get("tool_use_id")] = b.get("content")
    return all(call in found and found[call] == content for call, content in results)


def essential(dialect: str, body: Body, task: str, instructions: Sequence[str]) -> dict[str, Any]:
    """The client's request cut to what is always kept: the system prompt, the first user
    message (the task), later instructions (an older message that holds one reduced to its
    text blocks that do), the newest assistant message and what follows it."""
    messages = list(body["messages"])
    last_reply = max((i for i, m in enumerate(messages) if m["role"] == "assistant"),
                     default=len(messages))
    texts = (task, *instructions)

    def holds(value: Any) -> bool:
        return any(t in s for t in texts for s in _strings(value))

    first = next((i for i, m in enumerate(messages) if m["role"] != "system"), 0)
    kept: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if i >= last_reply or i <= first:
            kept.append(m)
        elif holds(m.get("content")):
            content = m["content"]
            if isinstance(content, list):
                content = [b for b in content if b.get("type") == "text" and holds(b)]
            kept.append({"role": m["role"], "content": content})
    return {**body, "messages": kept}


def essential_tokens(dialect: str, body: Body, task: str, instructions: Sequence[str],
                     meter: PromptMeter) -> int:
    return gateway_tokens(dialect, essential(dialect, body, task, instructions), meter)
