"""Provider prompt-cache hints on a forwarded request: pure, new values, inputs untouched.

- OpenAI-compatible routes: `prompt_cache_key`, a hash of the conversation's identity
  (tenant, user, conversation), so a conversation's requests are routed to the same cache —
  unless the client sent its own key.
- Anthropic routes: a `cache_control` breakpoint at the end of the leading run of system
  messages of the rewritten prompt (the client's system prompts, then the pinned, summary
  and profile blocks), which changes only when the client's prompt or memory does; and, when
  the rewrite names a longer stable prefix (`Rewrite.stable_messages`: the history forwarded
  whole, the stepped window, a compacted tool loop), one at its end first, so the next request
  reads it back and pays full price only for what follows. The client's own breakpoints are
  kept and counted: the gateway adds its marks (the stable prefix's first) only while the
  request holds fewer than Anthropic's four, and never where one is already — a client mark on
  a message the rewrite dropped or cleared is gone with it, and the gateway's mark at the end
  of the stable prefix takes its place. Anthropic takes system prompts
  only at the top, and the translation hoists every system message there: a memory block after
  the history (the recalled block, the stepped tail) would land before the cached prefix and
  change it every request. On these routes such a block is sent as a user message (the
  translation merges it into the current turn; its header says it is data, not instructions).
  The rewrite puts every client instruction first, so only memory blocks come after.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal, Mapping

from gateway.core.ids import ConversationKey
from gateway.core.messages import Message, collapsed, thaw

CacheHint = Literal["prompt_cache_key", "cache_control"]
EPHEMERAL = {"type": "ephemeral"}
_SYSTEM_ROLES = frozenset(("system", "developer"))


def without_cache_marks(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """The client's messages as the transcript compares and stores them: without their
    `cache_control` breakpoints (on a message or its content parts), and a content list of one
    plain text part as its text (the form the Messages door gives an unmarked one). A
    breakpoint is a per-request directive, not content: Claude Code moves its marks to the
    newest message each turn, so with them every turn would fork the conversation, and the
    stored copies a stateful client's history comes from would pile marks up past Anthropic's
    four. The model still gets this request's messages as sent (`one_shot.restore`). The same
    tuple when nothing changes."""
    out = tuple(_unmarked(m) for m in messages)
    return messages if all(a is b for a, b in zip(out, messages)) else out


def _unmarked(message: Message) -> Message:
    content = message.content
    if type(content) is str and not message.extra:  # the common message
        return message
    if not _may_change(message):  # looked at frozen, without thawing it
        return message
    extra = {k: v for k, v in message.to_openai().items() if k not in ("role", "content")}
    marked = extra.pop("cache_control", None) is not None
    if isinstance(content, tuple):
        parts = [{k: v for k, v in p.items() if k != "cache_control"}
                 if isinstance(p, dict) else p for p in thaw(content)]
        unmarked = collapsed(parts)
        if unmarked != thaw(content):
            return Message.of(message.role, unmarked, **extra)
    return Message.of(message.role, thaw(content), **extra) if marked else message


def _may_change(message: Message) -> bool:
    if any(k == "cache_control" for k, _ in message.extra):
        return True
    content = message.content
    if not isinstance(content, tuple):
        return False
    return len(content) == 1 or any(
        isinstance(part, tuple) and any(pair[0] == "cache_control" for pair in part
                                        if isinstance(pair, tuple) and len(pair) == 2)
        for part in content)


def prompt_cache_key(key: ConversationKey) -> str:
    """A stable, opaque key of one conversation (no id readable in it)."""
    parts = (key.tenant, key.user, key.conversation)
    digest = hashlib.sha256("".join(f"{len(p)}:{p}" for p in parts).encode()).hexdigest()
    return "cg-" + digest[:40]


MAX_BREAKPOINTS = 4
"""Anthropic's limit on `cache_control` blocks in one request (tools, system and messages)."""


def with_cache_hint(body: Mapping[str, Any], hint: CacheHint, key: ConversationKey,
                    stable: int | None = None, marked_elsewhere: int = 0) -> dict[str, Any]:
    """`body` (an OpenAI chat body) with the hint; the same content when the client gave its
    own or there is nowhere to put it. `stable`: how many leading messages are the prompt's
    stable prefix (None: its system messages). `marked_elsewhere`: the client's breakpoints
    the request carries where the chat body does not show them (an Anthropic client's marks
    on `tool_result` blocks), counted against the four."""
    if hint == "prompt_cache_key":
        if body.get("prompt_cache_key") is not None:
            return dict(body)
        return {**body, "prompt_cache_key": prompt_cache_key(key)}
    messages = body.get("messages")
    tools = body.get("tools")
    if not isinstance(messages, list):
        return dict(body)
    end = 0
    while end < len(messages) and isinstance(messages[end], Mapping) \
            and messages[end].get("role") in _SYSTEM_ROLES:
        end += 1
    out = [*messages[:end], *(_as_user(m) for m in messages[end:])]
    free = MAX_BREAKPOINTS - marked_elsewhere - _breakpoints(messages) \
        - (_breakpoints(tools) if isinstance(tools, list) else 0)
    for place in (_last_markable(messages, end, stable), end - 1):
        if free <= 0:
            break
        if place is not None and place >= 0 and not _breakpoints([out[place]]) \
                and (marked := _marked(out[place])) is not None:
            out[place] = marked
            free -= 1
    return {**body, "messages": out} if out != messages else dict(body)


def _as_user(message: Any) -> Any:
    """A memory block after the history as a user message; any other message as it is."""
    if isinstance(message, Mapping) and message.get("role") in _SYSTEM_ROLES:
        return {**message, "role": "user"}
    return message


def _last_markable(messages: list[Any], start: int, stable: int | None) -> int | None:
    """The last message of the stable prefix after the system run that has text to mark."""
    if stable is None:
        return None
    for place in range(min(stable, len(messages)) - 1, start - 1, -1):
        if isinstance(messages[place], Mapping) and _marked(messages[place]) is not None:
            return place
    return None


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


def _breakpoints(messages: list[Any]) -> int:
    """The `cache_control` marks on `messages` (or tools) and their content parts."""
    count = 0
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        count += message.get("cache_control") is not None
        content = message.get("content")
        if isinstance(content, list):
            count += sum(1 for p in content
                         if isinstance(p, Mapping) and p.get("cache_control") is not None)
    return count
