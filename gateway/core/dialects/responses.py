"""OpenAI's Responses API, translated to the internal (chat-shaped) form and back.

Request: `instructions` becomes a system message (per request, as OpenAI does: instructions
of an earlier response are not carried over); `input` — a string or items — becomes chat
messages: message items as they are (`input_text`/`output_text` parts as text parts),
consecutive assistant items and `function_call` items one assistant message with its
`tool_calls`, `function_call_output` items `tool` messages, reasoning items dropped (opaque to
an upstream reached over chat completions). Answers: `responses_answer`.

The chain (`previous_response_id`) is the caller's business: this module only says which call
ids a request answers (`answered_calls`), to check against those the previous response asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from gateway.core.dialects.marks import EXTENSION_PREFIX, extensions, marks
from gateway.core.messages import Message, collapsed
from gateway.errors import BadRequest

ACCEPTED = frozenset({"model", "input", "instructions", "previous_response_id", "store",
                      "stream", "tools", "tool_choice", "temperature", "top_p",
                      "max_output_tokens", "user", "metadata", "parallel_tool_calls", "text",
                      "reasoning", "include", "truncation", "service_tier", "prompt_cache_key",
                      "safety_identifier", "top_logprobs", "stream_options"})
"""Fields taken. `include`, `truncation` and `safety_identifier` are accepted and have no
effect (the gateway manages the context itself); others are refused by name below."""


REFUSED = {"background": "background responses are not supported by this gateway",
           "conversation": "use `previous_response_id` or the X-Conversation-Id header",
           "prompt": "stored prompts are not supported by this gateway"}


_COPIED = ("temperature", "top_p", "parallel_tool_calls", "service_tier", "prompt_cache_key")


@dataclass(frozen=True, slots=True)
class ResponsesRequest:
    model: str
    messages: tuple[Message, ...]
    """Internal form: the instructions first (if any), then the input."""
    passthrough: dict[str, Any]
    stream: bool
    store: bool
    previous_response_id: str | None
    user: str | None
    echo: dict[str, Any]
    """The request's settings as a `response` object repeats them."""
    answered_calls: frozenset[str]
    """Call ids of the input's `function_call_output` items."""
    asked_calls: frozenset[str]
    """Call ids of the input's own `function_call` items."""
    one_shot: frozenset[int] = frozenset()
    """Indexes into `messages` of those translated from items marked one-shot."""
    pinned: frozenset[int] = frozenset()
    """Likewise, pinned."""


def parse_responses_request(body: Mapping[str, Any], *, max_messages: int) -> ResponsesRequest:
    for name in body:
        if name in REFUSED and body[name] not in (None, False):
            raise BadRequest(f"`{name}`: {REFUSED[name]}.", param=name)
        if name not in ACCEPTED and name not in REFUSED and not name.startswith(
                EXTENSION_PREFIX):
            raise BadRequest(f"Unrecognized request argument supplied: {name}", param=name)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("`model` is required and must be a non-empty string.", param="model")
    previous = _optional(body, "previous_response_id", str)
    raw = body.get("input")
    if isinstance(raw, str):
        items: list[Any] = [{"role": "user", "content": raw}]
    elif isinstance(raw, list) and raw:
        items = raw
    else:
        raise BadRequest("`input` is required: a string or a non-empty array of items.",
                         param="input")
    if len(items) > max_messages:
        raise BadRequest(f"Invalid 'input': array too long. Expected an array with maximum "
                         f"length {max_messages}, but got {len(items)}.", param="input")
    instructions = _optional(body, "instructions", str)
    given = input_messages(items)
    messages, shift = given.messages, 0
    if instructions:
        messages.insert(0, Message.plain("system", instructions))
        shift = 1
    stream = _optional(body, "stream", bool) or False
    store = _optional(body, "store", bool)
    return ResponsesRequest(
        model=model, messages=tuple(messages), passthrough=_passthrough(body, stream),
        stream=stream, store=True if store is None else store, previous_response_id=previous,
        user=_optional(body, "user", str), echo=_echo(body, instructions),
        answered_calls=frozenset(given.answered), asked_calls=frozenset(given.asked),
        one_shot=frozenset(i + shift for i in given.one_shot),
        pinned=frozenset(i + shift for i in given.pinned))


def check_answers(request: ResponsesRequest, previously_asked: frozenset[str]) -> None:
    """`BadRequest` for a function_call_output answering no call of this input or of the
    previous response (OpenAI's rule: a call's output follows the call)."""
    unknown = sorted(request.answered_calls - request.asked_calls - previously_asked)
    if unknown:
        raise BadRequest(f"No tool call found for function call output with call_id "
                         f"{unknown[0]}.", param="input")


def _optional(body: Mapping[str, Any], name: str, kind: type) -> Any:
    value = body.get(name)
    if value is not None and type(value) is not kind:
        raise BadRequest(f"`{name}` must be a {kind.__name__.replace('str', 'string')}.",
                         param=name)
    return value


def _echo(body: Mapping[str, Any], instructions: str | None) -> dict[str, Any]:
    metadata = body.get("metadata")
    if metadata is not None and not (isinstance(metadata, Mapping) and all(
            isinstance(v, str) for v in metadata.values())):
        raise BadRequest("`metadata` must be an object of strings.", param="metadata")
    return {"instructions": instructions, "metadata": dict(metadata or {}),
            "tools": list(body.get("tools") or []),
            "tool_choice": body.get("tool_choice") or "auto",
            "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
            "temperature": body.get("temperature"), "top_p": body.get("top_p"),
            "max_output_tokens": body.get("max_output_tokens"), "user": body.get("user"),
            "text": body.get("text") or {"format": {"type": "text"}},
            "truncation": body.get("truncation") or "disabled"}


def _passthrough(body: Mapping[str, Any], stream: bool) -> dict[str, Any]:
    out: dict[str, Any] = {**extensions(body),
                           **{name: body[name] for name in _COPIED if body.get(name) is not None}}
    if stream:
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}  # response.completed carries usage
    limit = body.get("max_output_tokens")
    if limit is not None:
        if type(limit) is not int or limit < 1:
            raise BadRequest("`max_output_tokens` must be a positive integer.",
                             param="max_output_tokens")
        out["max_tokens"] = limit
    if isinstance(body.get("user"), str):
        out["user"] = body["user"]
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise BadRequest("`tools` must be an array.", param="tools")
        if tools:
            out["tools"] = [_tool(t, i) for i, t in enumerate(tools)]
    if body.get("tool_choice") is not None:
        out["tool_choice"] = _tool_choice(body["tool_choice"])
    format_ = _text_format(body.get("text"))
    if format_ is not None:
        out["response_format"] = format_
    reasoning = body.get("reasoning")
    if isinstance(reasoning, Mapping) and isinstance(reasoning.get("effort"), str):
        out["reasoning_effort"] = reasoning["effort"]
    return out


def _tool(tool: Any, index: int) -> dict[str, Any]:
    where = f"tools[{index}]"
    if not isinstance(tool, Mapping):
        raise BadRequest(f"`{where}` must be an object.", param=where)
    if tool.get("type") != "function":
        raise BadRequest(f"`{where}.type`: only function tools are supported by this gateway "
                         f"(got {tool.get('type')!r}).", param=f"{where}.type")
    if not isinstance(tool.get("name"), str) or not tool["name"]:
        raise BadRequest(f"`{where}.name` is required.", param=f"{where}.name")
    function = {k: tool[k] for k in ("name", "description", "parameters", "strict")
                if tool.get(k) is not None}
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, Mapping) and choice.get("type") == "function" \
            and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise BadRequest("`tool_choice` must be auto, none, required or a function "
                     "(`{\"type\": \"function\", \"name\": ...}`).", param="tool_choice")


def _text_format(text: Any) -> dict[str, Any] | None:
    if text is None:
        return None
    format_ = text.get("format") if isinstance(text, Mapping) else None
    kind = format_.get("type") if isinstance(format_, Mapping) else None
    if isinstance(text, Mapping) and (format_ is None or kind == "text"):
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema" and isinstance(format_.get("schema"), Mapping):
        schema = {k: format_[k] for k in ("name", "schema", "strict", "description")
                  if format_.get(k) is not None}
        return {"type": "json_schema", "json_schema": schema}
    raise BadRequest("`text.format` must be text, json_object or json_schema (with a "
                     "`schema`).", param="text.format")


@dataclass(slots=True)
class _Input:
    messages: list[Message] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)
    """Call ids of the function_call items."""
    answered: list[str] = field(default_factory=list)
    """Call ids of the function_call_output items."""
    one_shot: set[int] = field(default_factory=set)
    pinned: set[int] = field(default_factory=set)


def input_messages(items: list[Any]) -> _Input:
    """Input items as chat messages (and the call ids they ask and answer, the marks)."""
    out = _Input()
    messages, asked, answered = out.messages, out.asked, out.answered
    texts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    marked: list[tuple[bool, bool]] = []
    """The marks of the items of the assistant turn being gathered."""

    def mark(flags: tuple[bool, bool]) -> None:
        # Marks the message appended last (the chat door's markers: gateway/core/dialects/marks.py).
        shot, pin = flags
        if shot:
            out.one_shot.add(len(messages) - 1)
        if pin:
            out.pinned.add(len(messages) - 1)

    def flush() -> None:
        # One assistant turn: its text and its calls (the chat form of one reply).
        if texts or calls:
            content = collapsed(texts) if texts else None
            if calls:
                messages.append(Message.of("assistant", content, tool_calls=list(calls)))
            elif type(content) is str:
                messages.append(Message.plain("assistant", content))
            else:
                messages.append(Message.of("assistant", content))
            texts.clear()
            calls.clear()
            for flags in marked:
                mark(flags)
            marked.clear()

    for i, item in enumerate(items):
        # Exact-type checks first: the ABC check of `isinstance(x, Mapping)` costs more than
        # the common item's whole handling.
        if type(item) is dict:
            if len(item) == 2 and type(item.get("content")) is str \
                    and item.get("role") in ("user", "system", "developer"):
                # The common item, `{"role": ..., "content": "..."}`: nothing else to check.
                flush()
                messages.append(Message.plain(item["role"], item["content"]))
                continue
        elif not isinstance(item, Mapping):
            raise BadRequest(f"`input[{i}]` must be an object.", param=f"input[{i}]")
        where = f"input[{i}]"
        flags = marks(item, where) if len(item) > 2 else (False, False)
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") == "assistant":
            texts += _parts(item.get("content"), where, assistant=True)
            marked.append(flags)
        elif kind == "function_call":
            call_id, name = item.get("call_id"), item.get("name")
            arguments = item.get("arguments")
            if not (isinstance(call_id, str) and call_id and isinstance(name, str)
                    and isinstance(arguments, str)):
                raise BadRequest(f"`{where}`: a function_call needs `call_id`, `name` and "
                                 "string `arguments`.", param=where)
            calls.append({"id": call_id, "type": "function",
                          "function": {"name": name, "arguments": arguments}})
            asked.append(call_id)
            marked.append(flags)
        elif kind == "reasoning":
            continue
        else:
            flush()
            messages.append(_other(item, kind, where, answered))
            mark(flags)
    flush()
    return out


def _other(item: Mapping[str, Any], kind: Any, where: str, answered: list[str]) -> Message:
    if kind == "function_call_output":
        call_id, output = item.get("call_id"), item.get("output")
        if not isinstance(call_id, str) or not call_id:
            raise BadRequest(f"`{where}.call_id` is required.", param=f"{where}.call_id")
        if isinstance(output, list):
            output = collapsed(_parts(output, f"{where}.output", assistant=False))
        elif not isinstance(output, str):
            raise BadRequest(f"`{where}.output` must be a string.", param=f"{where}.output")
        answered.append(call_id)
        return Message.of("tool", output, tool_call_id=call_id)
    if kind != "message":
        raise BadRequest(f"`{where}.type`: `{kind}` items are not supported by this gateway "
                         "(message, function_call, function_call_output, reasoning are).",
                         param=f"{where}.type")
    role = item.get("role")
    if role not in ("user", "system", "developer"):
        raise BadRequest(f"`{where}.role` must be user, assistant, system or developer.",
                         param=f"{where}.role")
    return Message.of(role, collapsed(_parts(item.get("content"), where, assistant=False)))


def _parts(content: Any, where: str, *, assistant: bool) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise BadRequest(f"`{where}.content` must be a string or an array of parts.",
                         param=f"{where}.content")
    parts = []
    for j, part in enumerate(content):
        kind = part.get("type") if type(part) is dict or isinstance(part, Mapping) else None
        if kind in ("input_text", "output_text") and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            parts.append({"type": "text", "text": part["refusal"]})
        elif kind == "input_image" and not assistant and isinstance(part.get("image_url"), str):
            image = {"url": part["image_url"]}
            if isinstance(part.get("detail"), str):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            at = f"{where}.content[{j}]"
            raise BadRequest(f"`{at}`: expected input_text, output_text or input_image (with an "
                             f"`image_url`); got {kind!r}.", param=at)
    return parts
