"""Anthropic's Messages API, translated to the internal (OpenAI-shaped) form and back.

Request: top-level `system` becomes a system message; each message's content blocks become
OpenAI content parts, `tool_use` blocks an assistant's `tool_calls`, `tool_result` blocks
`tool` messages placed before the rest of their user message (OpenAI wants a call's result
right after the call; Anthropic wants results first in the next user message: both hold).
Thinking blocks ride along untouched as the assistant message's `thinking_blocks` (litellm's
field for them). Answers: `anthropic_answer`. No input is mutated.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Mapping

from gateway.core.dialects.marks import extensions, marks
from gateway.core.ids import valid_id
from gateway.core.messages import Message, collapsed
from gateway.errors import BadRequest

BLOCK_TYPES = frozenset({"text", "image", "tool_use", "tool_result", "thinking",
                         "redacted_thinking"})
"""The content block types translated. Anthropic's others (documents, server tools, search
results, ...) are refused by name: a model behind an OpenAI-shaped door could not see them."""


KNOWN_UNSUPPORTED = frozenset({"document", "search_result", "server_tool_use",
                               "web_search_tool_result", "web_fetch_tool_result",
                               "code_execution_tool_result", "mcp_tool_use", "mcp_tool_result",
                               "container_upload"})


# Sampling fields with the same name and meaning in both dialects.
_SAME = ("temperature", "top_p", "top_k", "stream")


@dataclass(frozen=True, slots=True)
class MessagesRequest:
    """A Messages API body as the pipeline needs it."""

    model: str
    messages: tuple[Message, ...]
    """Internal form: the system prompt first (if any), then the conversation."""
    passthrough: dict[str, Any]
    """The OpenAI request fields for the upstream (max_tokens, stop, tools, tool_choice, ...)."""
    stream: bool
    user: str | None
    """`metadata.user_id` as a gateway user id (hashed when it is not a valid id)."""
    one_shot: frozenset[int] = frozenset()
    """Indexes into `messages` of those translated from a message marked one-shot."""
    pinned: frozenset[int] = frozenset()
    """Likewise, pinned."""


def parse_messages_request(body: Mapping[str, Any], *, max_messages: int) -> MessagesRequest:
    """The typed request, or `BadRequest` naming the field at fault (Anthropic's rules:
    `model`, `max_tokens` and `messages` required; a tool_result answers a tool_use of the
    message right before it)."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("model: Field required (a non-empty string).", param="model")
    max_tokens = body.get("max_tokens")
    if type(max_tokens) is not int or max_tokens < 1:
        raise BadRequest("max_tokens: Field required (an integer of at least 1).",
                         param="max_tokens")
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise BadRequest("messages: Field required (a non-empty array).", param="messages")
    if len(raw) > max_messages:
        raise BadRequest(f"messages: at most {max_messages} messages, got {len(raw)}.",
                         param="messages")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("stream: Input should be a valid boolean.", param="stream")
    messages = [*_system(body.get("system"))]
    one_shot: set[int] = set()
    pinned: set[int] = set()
    previous: Mapping[str, Any] | None = None
    for i, m in enumerate(raw):
        start = len(messages)
        messages.extend(_message(m, i, previous))
        if len(m) > 2:  # markers are extra keys: most messages have role and content only
            shot, pin = marks(m, f"messages.{i}")
            if shot or pin:
                (one_shot if shot else pinned).update(range(start, len(messages)))
        previous = m
    return MessagesRequest(model=model, messages=tuple(messages),
                           passthrough=_passthrough(body, max_tokens), stream=stream,
                           user=_user(body.get("metadata")), one_shot=frozenset(one_shot),
                           pinned=frozenset(pinned))


def _user(metadata: Any) -> str | None:
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise BadRequest("metadata: Input should be an object.", param="metadata")
    user = metadata.get("user_id")
    if user is None:
        return None
    if not isinstance(user, str) or not user:
        raise BadRequest("metadata.user_id: Input should be a string.", param="metadata.user_id")
    # Claude Code sends a long composite id: kept stable, as a valid gateway id.
    return user if valid_id(user) else "u-" + hashlib.sha256(user.encode()).hexdigest()[:40]


def _passthrough(body: Mapping[str, Any], max_tokens: int) -> dict[str, Any]:
    out: dict[str, Any] = {**extensions(body), "max_tokens": max_tokens}
    for name in _SAME:
        if body.get(name) is not None:
            out[name] = body[name]
    if body.get("stream"):
        # The Messages stream ends with the usage; an OpenAI stream only sends it when asked.
        out["stream_options"] = {"include_usage": True}
    stop = body.get("stop_sequences")
    if stop is not None:
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise BadRequest("stop_sequences: Input should be an array of strings.",
                             param="stop_sequences")
        if stop:
            out["stop"] = list(stop)
    if body.get("thinking") is not None:
        out["thinking"] = body["thinking"]  # litellm's own field, for Anthropic models
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise BadRequest("tools: Input should be an array.", param="tools")
        if tools:
            out["tools"] = [_tool(t, i) for i, t in enumerate(tools)]
    if body.get("tool_choice") is not None:
        out.update(_tool_choice(body["tool_choice"]))
    user = body.get("metadata", {}).get("user_id") if isinstance(body.get("metadata"),
                                                                  Mapping) else None
    if isinstance(user, str) and user:
        out["user"] = user
    return out


def _tool(tool: Any, index: int) -> dict[str, Any]:
    where = f"tools.{index}"
    if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str):
        raise BadRequest(f"{where}: a tool needs a `name`.", param=where)
    if tool.get("type") not in (None, "custom"):
        raise BadRequest(f"{where}.type: server tools (`{tool.get('type')}`) are not "
                         "supported by this gateway; define a custom tool.", param=where)
    schema = tool.get("input_schema")
    if not isinstance(schema, Mapping):
        raise BadRequest(f"{where}.input_schema: Field required (an object).",
                         param=f"{where}.input_schema")
    function: dict[str, Any] = {"name": tool["name"], "parameters": dict(schema)}
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    out: dict[str, Any] = {"type": "function", "function": function}
    if tool.get("cache_control") is not None:
        out["cache_control"] = tool["cache_control"]
    return out


def _tool_choice(choice: Any) -> dict[str, Any]:
    if not isinstance(choice, Mapping):
        raise BadRequest("tool_choice: Input should be an object.", param="tool_choice")
    kind = choice.get("type")
    out: dict[str, Any]
    if kind == "auto":
        out = {"tool_choice": "auto"}
    elif kind == "any":
        out = {"tool_choice": "required"}
    elif kind == "none":
        out = {"tool_choice": "none"}
    elif kind == "tool" and isinstance(choice.get("name"), str):
        out = {"tool_choice": {"type": "function", "function": {"name": choice["name"]}}}
    else:
        raise BadRequest("tool_choice.type: one of auto, any, tool (with a `name`), none.",
                         param="tool_choice")
    if choice.get("disable_parallel_tool_use") is True:
        out["parallel_tool_calls"] = False
    return out


def _system(system: Any) -> tuple[Message, ...]:
    if system is None or system == "" or system == []:
        return ()
    return (_system_message(system, "system"),)


def _system_message(content: Any, where: str) -> Message:
    """`system`, or a system message's content: a string or text blocks."""
    if isinstance(content, str):
        return Message.plain("system", content)
    if not isinstance(content, list):
        raise BadRequest(f"{where}: Input should be a string or an array of text blocks.",
                         param=where)
    parts = []
    for i, block in enumerate(content):
        if not isinstance(block, Mapping) or block.get("type") != "text" \
                or not isinstance(block.get("text"), str):
            raise BadRequest(f"{where}.{i}: only text blocks are allowed in a system prompt.",
                             param=f"{where}.{i}")
        parts.append(_text_part(block))
    return Message.of("system", collapsed(parts))


def _message(data: Any, index: int, previous: Mapping[str, Any] | None) -> list[Message]:
    # Exact-type checks first: the ABC check of `isinstance(x, Mapping)` and the name of the
    # field cost more than the common message's whole handling.
    if type(data) is dict:
        role, content = data.get("role"), data.get("content")
        if type(content) is str and (role == "user" or role == "assistant"):
            return [Message.plain(role, content)]
    where = f"messages.{index}"
    if not isinstance(data, Mapping):
        raise BadRequest(f"{where}: Input should be an object.", param=where)
    role = data.get("role")
    if role == "system":
        # Claude Code sends instructions this way (a system message among the turns); they
        # are the client's instructions like `system`, and forwarded with them.
        return [_system_message(data.get("content"), where)]
    if role not in ("user", "assistant"):
        raise BadRequest(f"{where}.role: Input should be 'user', 'assistant' or 'system'.",
                         param=f"{where}.role")
    content = data.get("content")
    if isinstance(content, str):
        return [Message.plain(role, content)]
    if not isinstance(content, list):
        raise BadRequest(f"{where}.content: Input should be a string or an array of content "
                         "blocks.", param=f"{where}.content")
    for j, block in enumerate(content):
        _check_block(block, f"{where}.content.{j}", role)
    if role == "assistant":
        return [assistant_message(content)]
    return _user_messages(content, where, previous)


def _check_block(block: Any, where: str, role: str) -> None:
    if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
        raise BadRequest(f"{where}: a content block is an object with a `type`.", param=where)
    kind = block["type"]
    if kind in KNOWN_UNSUPPORTED:
        raise BadRequest(f"{where}.type: `{kind}` blocks are not supported by this gateway.",
                         param=f"{where}.type")
    if kind not in BLOCK_TYPES:
        raise BadRequest(f"{where}.type: unknown content block type `{kind}`; expected one of "
                         f"{', '.join(sorted(BLOCK_TYPES))}.", param=f"{where}.type")
    own = {"tool_use": "assistant", "thinking": "assistant", "redacted_thinking": "assistant",
           "tool_result": "user", "image": "user"}.get(kind)
    if own is not None and own != role:
        raise BadRequest(f"{where}: `{kind}` blocks belong in {own} messages.", param=where)
    if kind == "text" and not isinstance(block.get("text"), str):
        raise BadRequest(f"{where}.text: Field required (a string).", param=f"{where}.text")
    if kind == "tool_use" and not (isinstance(block.get("id"), str) and block["id"]
                                   and isinstance(block.get("name"), str)
                                   and isinstance(block.get("input"), Mapping)):
        raise BadRequest(f"{where}: a tool_use block needs `id`, `name` and an object `input`.",
                         param=where)
    if kind == "tool_result" and not (isinstance(block.get("tool_use_id"), str)
                                      and block["tool_use_id"]):
        raise BadRequest(f"{where}.tool_use_id: Field required.", param=f"{where}.tool_use_id")


def assistant_message(blocks: list[Any]) -> Message:
    """An assistant message's (checked) content blocks as one chat message: text, tool calls,
    thinking blocks untouched."""
    texts, calls, thinking = [], [], []
    for block in blocks:
        kind = block["type"]
        if kind == "text":
            texts.append(_text_part(block))
        elif kind == "tool_use":
            calls.append({"id": block["id"], "type": "function",
                          "function": {"name": block["name"],
                                       "arguments": json.dumps(block["input"],
                                                               ensure_ascii=False)}})
        else:  # thinking, redacted_thinking: untouched
            thinking.append(dict(block))
    extra: dict[str, Any] = {}
    if calls:
        extra["tool_calls"] = calls
    if thinking:
        extra["thinking_blocks"] = thinking
    return Message.of("assistant", collapsed(texts) if texts else None, **extra)


def _user_messages(blocks: list[Any], where: str,
                   previous: Mapping[str, Any] | None) -> list[Message]:
    asked = _tool_use_ids(previous)
    results, parts = [], []
    for j, block in enumerate(blocks):
        kind = block["type"]
        if kind == "tool_result":
            if block["tool_use_id"] not in asked:
                raise BadRequest(f"{where}.content.{j}: unexpected `tool_use_id` found in "
                                 "`tool_result` blocks: "
                                 f"{block['tool_use_id']}. Each `tool_result` block must have a "
                                 "corresponding `tool_use` block in the previous message.",
                                 param=f"{where}.content.{j}.tool_use_id")
            results.append(Message.of("tool", _result_content(block, f"{where}.content.{j}"),
                                      tool_call_id=block["tool_use_id"]))
        elif kind == "image":
            parts.append(_image_part(block, f"{where}.content.{j}"))
        else:
            parts.append(_text_part(block))
    if parts:
        results.append(Message.of("user", collapsed(parts)))
    return results


def _tool_use_ids(message: Mapping[str, Any] | None) -> frozenset[str]:
    if message is None or message.get("role") != "assistant" \
            or not isinstance(message.get("content"), list):
        return frozenset()
    return frozenset(b["id"] for b in message["content"]
                     if isinstance(b, Mapping) and b.get("type") == "tool_use"
                     and isinstance(b.get("id"), str))


def _result_content(block: Mapping[str, Any], where: str) -> Any:
    content = block.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest(f"{where}.content: a string or an array of text blocks.",
                         param=f"{where}.content")
    parts = []
    for k, part in enumerate(content):
        if not isinstance(part, Mapping) or part.get("type") != "text" \
                or not isinstance(part.get("text"), str):
            # OpenAI-shaped tool messages carry text only.
            raise BadRequest(f"{where}.content.{k}: only text blocks are supported in a "
                             "tool_result by this gateway.", param=f"{where}.content.{k}")
        parts.append(_text_part(part))
    return collapsed(parts)


def _text_part(block: Mapping[str, Any]) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "text", "text": block["text"]}
    if block.get("cache_control") is not None:  # litellm carries it to Anthropic models
        part["cache_control"] = block["cache_control"]
    return part


def _image_part(block: Mapping[str, Any], where: str) -> dict[str, Any]:
    source = block.get("source")
    if isinstance(source, Mapping) and source.get("type") == "base64" \
            and isinstance(source.get("data"), str) and isinstance(source.get("media_type"), str):
        url = f"data:{source['media_type']};base64,{source['data']}"
    elif isinstance(source, Mapping) and source.get("type") == "url" \
            and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        raise BadRequest(f"{where}.source: a base64 source (`media_type`, `data`) or a url "
                         "source.", param=f"{where}.source")
    return {"type": "image_url", "image_url": {"url": url}}
