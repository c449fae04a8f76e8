"""The gateway's (rewritten) chat messages back in Anthropic's Messages form, for an upstream
that speaks it (same-dialect pass-through); the inverse of `anthropic.parse_messages_request`.

What the client sent comes back as it sent it: a message it sent as a string stays a string,
text blocks keep their `cache_control`, a user message's tool results come first in it again
(a `tool_result` keeps the client's `cache_control` while forwarded as sent),
thinking blocks lead their assistant message untouched, and a `tool_result` the client flagged
`is_error` carries the flag again (by its `tool_use_id`). What the gateway added is Anthropic's
too: every system message (the client's, then memory's blocks, wherever the rewrite put them)
becomes a text block of the top-level `system`, in order; a conversation the rewrite left
opening with the model's reply opens with a short user line (`OPENING`), as Anthropic requires.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from gateway.core.dialects.anthropic_answer import tool_input
from gateway.core.messages import Message


OPENING = "[earlier messages left out]"
"""The user's opening of a Messages conversation whose forwarded history starts with the
model's reply."""


def errored_tool_uses(body: Mapping[str, Any]) -> frozenset[str]:
    """The `tool_use_id`s of the request's tool results flagged `is_error: true`."""
    ids = set()
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, Mapping) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, Mapping) and block.get("type") == "tool_result" \
                    and block.get("is_error") is True:
                ids.add(block.get("tool_use_id"))
    return frozenset(i for i in ids if isinstance(i, str))


def tool_result_marks(body: Mapping[str, Any]) -> dict[str, tuple[Any, str]]:
    """The request's `tool_result` blocks that carry the client's `cache_control`, by
    `tool_use_id`: (the mark, the result's text)."""
    marks = {}
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, Mapping) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, Mapping) and block.get("type") == "tool_result" \
                    and block.get("cache_control") is not None \
                    and isinstance(block.get("tool_use_id"), str):
                marks[block["tool_use_id"]] = (block["cache_control"],
                                               _text_of(block.get("content")))
    return marks


def kept_marks(marks: Mapping[str, tuple[Any, str]], messages: Iterable[Message]) -> int:
    """How many of `tool_result_marks` go upstream with `messages`: those whose result is
    forwarded as the client sent it (a result the rewrite cleared loses its mark)."""
    return sum(1 for m in messages if m.role == "tool" and _keeps_mark(marks, m.to_openai()))


def anthropic_request(messages: Iterable[Message], errored: frozenset[str] = frozenset(),
                      marks: Mapping[str, tuple[Any, str]] | None = None
                      ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(`system` blocks, `messages`) of a Messages body saying what `messages` say.
    `marks`: the client's `tool_result` breakpoints (`tool_result_marks`), put back on the
    results forwarded as sent; a breakpoint the rewrite put in a result's text goes on the
    result, where a client puts it."""
    system: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []  # tool results waiting for their user message
    for message in messages:
        data = message.to_openai()
        role = data["role"]
        if role in ("system", "developer"):
            system += _text_blocks(data.get("content"))
        elif role == "tool":
            content = _result_content(data.get("content"))
            result = {"type": "tool_result", "tool_use_id": data.get("tool_call_id") or "",
                      "content": content}
            if result["tool_use_id"] in errored:
                result["is_error"] = True
            lifted = [b.pop("cache_control") for b in content if "cache_control" in b] \
                if isinstance(content, list) else []
            if lifted:
                result["cache_control"] = lifted[-1]
                if len(content) == 1:  # one text, as the chat form holds it: a string again
                    result["content"] = content[0]["text"]
            elif marks and _keeps_mark(marks, data):
                result["cache_control"] = marks[result["tool_use_id"]][0]
            results.append(result)
        elif role == "user":
            content = data.get("content")
            if results:
                out.append({"role": "user", "content": results + _blocks(content)})
                results = []
            else:
                out.append({"role": "user", "content": _user_content(content)})
        elif role == "assistant":
            if results:
                out.append({"role": "user", "content": results})
                results = []
            out.append({"role": "assistant", "content": _assistant_content(data)})
    if results:
        out.append({"role": "user", "content": results})
    if out and out[0]["role"] != "user":
        # Anthropic's conversation opens with the user; a rewritten chat may open with the
        # model's reply (the newest turn did not fit whole): say so where the user's was.
        out.insert(0, {"role": "user", "content": OPENING})
    return system, out


def _keeps_mark(marks: Mapping[str, tuple[Any, str]], data: Mapping[str, Any]) -> bool:
    mark = marks.get(data.get("tool_call_id") or "")
    return mark is not None and _text_of(data.get("content")) == mark[1]


def _text_of(content: Any) -> str:
    """The text of a result's content (a string or text blocks)."""
    if isinstance(content, str):
        return content
    return "".join(b["text"] for b in content or [] if isinstance(b, Mapping)
                   and isinstance(b.get("text"), str))


def _user_content(content: Any) -> Any:
    return content if isinstance(content, str) else _blocks(content)


def _assistant_content(data: Mapping[str, Any]) -> Any:
    content = data.get("content")
    thinking = [dict(b) for b in data.get("thinking_blocks") or [] if isinstance(b, Mapping)]
    calls = [c for c in data.get("tool_calls") or [] if isinstance(c, Mapping)]
    if isinstance(content, str) and not thinking and not calls:
        return content
    blocks = thinking + _blocks(content)
    for call in calls:
        function = call.get("function") if isinstance(call.get("function"), Mapping) else {}
        blocks.append({"type": "tool_use", "id": call.get("id") or "",
                       "name": function.get("name") or "",
                       "input": tool_input(function.get("arguments"))})
    return blocks


def _blocks(content: Any) -> list[dict[str, Any]]:
    """A chat content (a string or parts) as Messages content blocks."""
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    blocks = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, Mapping):
            continue
        if part.get("type") == "image_url":
            blocks.append(_image(part.get("image_url")))
        elif isinstance(part.get("text"), str):
            blocks.append(_text(part))
    return blocks


def _text_blocks(content: Any) -> list[dict[str, Any]]:
    return [b for b in _blocks(content) if b["type"] == "text"]


def _result_content(content: Any) -> Any:
    return content if isinstance(content, str) or content is None else _text_blocks(content)


def _text(part: Mapping[str, Any]) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": part["text"]}
    if part.get("cache_control") is not None:
        block["cache_control"] = part["cache_control"]
    return block


def _image(image_url: Any) -> dict[str, Any]:
    url = image_url.get("url") if isinstance(image_url, Mapping) else image_url
    url = url if isinstance(url, str) else ""
    if url.startswith("data:") and ";base64," in url:
        media_type, data = url[5:].split(";base64,", 1)
        return {"type": "image", "source": {"type": "base64", "media_type": media_type,
                                            "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}
