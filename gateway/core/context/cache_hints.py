"""Provider prompt-cache hints on a forwarded request: pure, new values, inputs untouched.

- OpenAI-compatible routes: `prompt_cache_key`, a hash of the conversation's identity
  (tenant, user, conversation), so a conversation's requests are routed to the same cache —
  unless the client sent its own key.
- Anthropic routes: one `cache_control` breakpoint at the end of the stable prefix — the
  leading run of system messages of the rewritten prompt (the client's system prompts, then
  the pinned, summary and profile blocks), which changes only when the client's prompt or
  memory does — unless the client placed breakpoints of its own (Anthropic allows four, and
  the client knows its prompt).
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal, Mapping

from gateway.core.ids import ConversationKey

CacheHint = Literal["prompt_cache_key", "cache_control"]
EPHEMERAL = {"type": "ephemeral"}
_SYSTEM_ROLES = frozenset(("system", "developer"))


def prompt_cache_key(key: ConversationKey) -> str:
    """A stable, opaque key of one conversation (no id readable in it)."""
    parts = (key.tenant, key.user, key.conversation)
    digest = hashlib.sha256("".join(f"{len(p)}:{p}" for p in parts).encode()).hexdigest()
    return "cg-" + digest[:40]


def with_cache_hint(body: Mapping[str, Any], hint: CacheHint,
                    key: ConversationKey) -> dict[str, Any]:
    """`body` (an OpenAI chat body) with the hint; the same content when the client gave its
    own or there is nowhere to put it."""
    if hint == "prompt_cache_key":
        if body.get("prompt_cache_key") is not None:
            return dict(body)
        return {**body, "prompt_cache_key": prompt_cache_key(key)}
    messages = body.get("messages")
    tools = body.get("tools")
    if not isinstance(messages, list) or _has_breakpoint(messages) or (
            isinstance(tools, list) and _has_breakpoint(tools)):
        return dict(body)
    end = 0
    while end < len(messages) and isinstance(messages[end], Mapping) \
            and messages[end].get("role") in _SYSTEM_ROLES:
        end += 1
    marked = _marked(messages[end - 1]) if end else None
    if marked is None:
        return dict(body)
    return {**body, "messages": [*messages[:end - 1], marked, *messages[end:]]}


def _marked(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """The message with a breakpoint on its last text part (None: it has no text)."""
    content = message.get("content")
    if isinstance(content, str):
        if not content:
            return None
        return {**message, "content": [{"type": "text", "text": content,
                                        "cache_control": dict(EPHEMERAL)}]}
    if isinstance(content, list):
        for i in range(len(content) - 1, -1, -1):
            part = content[i]
            if isinstance(part, Mapping) and part.get("type") == "text" and part.get("text"):
                parts = [*content[:i], {**part, "cache_control": dict(EPHEMERAL)},
                         *content[i + 1:]]
                return {**message, "content": parts}
    return None


def _has_breakpoint(messages: list[Any]) -> bool:
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        if message.get("cache_control") is not None:
            return True
        content = message.get("content")
        if isinstance(content, list) and any(isinstance(p, Mapping)
                                             and p.get("cache_control") is not None
                                             for p in content):
            return True
    return False
