"""The built-in fake upstream: an OpenAI chat model that behaves by its model name.

Shared by the in-process adapter (`FakeUpstream`, model strings `fake/<behaviour>`) and the
standalone server (`fake_server.py`, model `<behaviour>`). Behaviours:

- `echo` — replies with the last user message's text. Any unknown name behaves like `echo`.
- `echo-messages` — replies with `json.dumps(messages, ensure_ascii=False)`: exactly what it
  was sent, so tests and benchmarks can see what the gateway forwarded.
- `slow` (2 s), `slow-<ms>` (e.g. `slow-250`) — `echo` after a delay; spread over the chunks
  when streaming.
- `error` (500), `error-<status>` (e.g. `error-429`) — that HTTP status with OpenAI's error body.
- `tool-call` — one call of the request's first tool (or `echo` if it sent none), with
  `{"input": <last user text>}` as arguments and finish_reason `tool_calls`.
- `cached-<n>` (e.g. `cached-1024`) — `echo`, its usage saying the first n prompt tokens (at
  most all) were read from a prompt cache (`prompt_tokens_details.cached_tokens`).

`stop`: an echoed text that holds a stop sequence is cut before the first that occurs;
finish_reason is `stop` and the choice says which sequence in `stop_reason`, as vLLM's
OpenAI-compatible server does (OpenAI's own API does not say).

The same behaviours answer in Anthropic's Messages form at the fake server's `/v1/messages`
(gateway/upstream/fake_messages.py).

Usage is counted with cl100k as OpenAI counts a chat prompt. A stream asked for its usage
(`stream_options.include_usage`) ends with the usage chunk and carries `"usage": null` in
every other chunk, as OpenAI's does.

Responses say they are fake (`model: fake/<name>`, `system_fingerprint: context-gateway-fake`)
and are deterministic except for ids and timestamps.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, AsyncIterator

from gateway.errors import UpstreamError
from gateway.ports import UpstreamCall

FINGERPRINT = "context-gateway-fake"
SLOW_DEFAULT_SECONDS = 2.0
BEHAVIOURS = ("echo", "echo-messages", "slow", "slow-250", "error", "error-429", "error-400",
              "error-503", "tool-call")
"""Names listed by the fake server's /v1/models (any name works)."""

_CHUNK_PIECES = 4
_ERROR_TEXT = {400: ("invalid_request_error", "invalid_request"),
               401: ("invalid_request_error", "invalid_api_key"),
               403: ("invalid_request_error", "permission_denied"),
               404: ("invalid_request_error", "model_not_found"),
               429: ("requests", "rate_limit_exceeded")}


@dataclass(frozen=True, slots=True)
class Behaviour:
    name: str
    """The model name without `fake/`, as echoed in responses' `model` (`fake/<name>`)."""
    kind: str
    """One of echo, echo-messages, tool-call, error."""
    delay: float = 0.0
    status: int = 200
    cached: int = 0
    """Prompt tokens reported as read from a cache (`cached-<n>`)."""


def behaviour_for(model: str) -> Behaviour:
    name = model.removeprefix("fake/")
    if name in ("echo-messages", "tool-call"):
        return Behaviour(name, name)
    if name == "slow":
        return Behaviour(name, "echo", delay=SLOW_DEFAULT_SECONDS)
    if name.startswith("slow-") and name[5:].isdigit():
        return Behaviour(name, "echo", delay=int(name[5:]) / 1000)
    if name.startswith("cached-") and name[7:].isdigit():
        return Behaviour(name, "echo", cached=int(name[7:]))
    if name == "error":
        return Behaviour(name, "error", status=500)
    if name.startswith("error-") and name[6:].isdigit() and 400 <= int(name[6:]) <= 599:
        return Behaviour(name, "error", status=int(name[6:]))
    return Behaviour(name, "echo")


def error_body(behaviour: Behaviour) -> dict[str, Any]:
    """OpenAI's error shape for an `error*` behaviour."""
    type_, code = _ERROR_TEXT.get(behaviour.status, ("server_error", None))
    return {"error": {"message": f"The fake upstream ({behaviour.name}) failed with HTTP "
                                 f"{behaviour.status}, as asked.",
                      "type": type_, "param": None, "code": code}}


def request_problem(body: dict[str, Any]) -> tuple[str, str] | None:
    """(message, param) of what a real OpenAI upstream would refuse with 400 among the fields
    the fake reads, or None. The fake must answer hostile input as a 4xx, never crash."""
    if not isinstance(body.get("messages", []), list):
        return "Invalid type for 'messages': expected an array.", "messages"
    if body.get("stream") is not None and not isinstance(body.get("stream"), bool):
        return "Invalid type for 'stream': expected a boolean.", "stream"
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            return "Invalid type for 'stream_options': expected an object.", "stream_options"
        if not isinstance(options.get("include_usage", False), bool):
            return ("Invalid type for 'stream_options.include_usage': expected a boolean.",
                    "stream_options.include_usage")
    stop = body.get("stop")
    if stop is not None and not isinstance(stop, str) and not (
            isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        return "Invalid type for 'stop': expected a string or an array of strings.", "stop"
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or not all(
                isinstance(t, dict) and isinstance(t.get("function", {}), dict) for t in tools):
            return "Invalid type for 'tools': expected an array of tool objects.", "tools"
    return None


def bad_request_body(message: str, param: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": param,
                      "code": None}}


class FakeModel:
    """Turns a chat request into the fake's OpenAI-shaped answer (no I/O, no sleeping)."""

    def __init__(self) -> None:
        self._encoding: Any = None  # tiktoken cl100k, loaded on first count

    def count(self, text: str) -> int:
        if self._encoding is None:
            import tiktoken  # offline: gateway._offline points its cache at litellm's files

            self._encoding = tiktoken.get_encoding("cl100k_base")
        return len(self._encoding.encode(text, disallowed_special=()))

    def completion(self, behaviour: Behaviour, body: dict[str, Any]) -> dict[str, Any]:
        """A `chat.completion`; the caller handles `error` behaviours (see `error_body`)."""
        content, tool_call, stop = self._reply(behaviour, body)
        message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
        if tool_call is not None:
            message["tool_calls"] = [tool_call]
        return {
            "id": _new_id(), "object": "chat.completion", "created": int(time.time()),
            "model": f"fake/{behaviour.name}", "system_fingerprint": FINGERPRINT,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "stop" if tool_call is None else "tool_calls",
                         **({"stop_reason": stop} if stop is not None else {})}],
            "usage": self._usage(body, content, tool_call, behaviour.cached),
        }

    def chunks(self, behaviour: Behaviour, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The `chat.completion.chunk`s of a streamed answer: a role chunk, the content (or
        tool-call arguments) in a few pieces, a final chunk with finish_reason, and a usage
        chunk (`choices: []`) when `stream_options.include_usage` is true."""
        content, tool_call, stop = self._reply(behaviour, body)
        head = {"id": _new_id(), "object": "chat.completion.chunk", "created": int(time.time()),
                "model": f"fake/{behaviour.name}", "system_fingerprint": FINGERPRINT}

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                         "finish_reason": finish_reason}]}

        if tool_call is None:
            out = [chunk({"role": "assistant", "content": "", "refusal": None})]
            out += [chunk({"content": piece}) for piece in pieces(content or "")]
            out.append(chunk({}, "stop"))
            if stop is not None:
                out[-1]["choices"][0]["stop_reason"] = stop
        else:
            function = tool_call["function"]
            first = {"index": 0, "id": tool_call["id"], "type": "function",
                     "function": {"name": function["name"], "arguments": ""}}
            out = [chunk({"role": "assistant", "content": None, "tool_calls": [first]})]
            out += [chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
                    for piece in pieces(function["arguments"])]
            out.append(chunk({}, "tool_calls"))
        if (body.get("stream_options") or {}).get("include_usage"):
            out = [{**c, "usage": None} for c in out]
            out.append({**head, "choices": [],
                        "usage": self._usage(body, content, tool_call, behaviour.cached)})
        return out

    def _reply(self, behaviour: Behaviour, body: dict[str, Any]
               ) -> tuple[str | None, dict[str, Any] | None, str | None]:
        """The text or the tool call, and the stop sequence the text was cut at."""
        messages = body.get("messages") or []
        if behaviour.kind == "echo-messages":
            return json.dumps(messages, ensure_ascii=False), None, None
        text = _last_user_text(messages)
        if behaviour.kind == "tool-call":
            tools = body.get("tools") or []
            name = "echo"
            if tools and isinstance(tools[0], dict):
                name = (tools[0].get("function") or {}).get("name") or name
            arguments = json.dumps({"input": text}, ensure_ascii=False)
            return None, {"id": "call_" + uuid.uuid4().hex[:24], "type": "function",
                          "function": {"name": name, "arguments": arguments}}, None
        stop = body.get("stop")
        text, matched = cut_at_stop(text, [stop] if isinstance(stop, str) else stop or [])
        return text, None, matched

    def _usage(self, body: dict[str, Any], content: str | None,
               tool_call: dict[str, Any] | None, cached: int = 0) -> dict[str, Any]:
        prompt = 3  # reply priming, then OpenAI's per-message accounting
        for message in body.get("messages") or []:
            if isinstance(message, dict):
                prompt += 3 + self.count(str(message.get("role", "")))
                prompt += self.count(text_of(message.get("content")))
        reply = content if tool_call is None else tool_call["function"]["arguments"]
        completion = self.count(reply or "")
        usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                                 "total_tokens": prompt + completion}
        if cached:
            usage["prompt_tokens_details"] = {"cached_tokens": min(cached, prompt)}
        return usage


class FakeUpstream:
    """ports.Upstream for model strings `fake/<behaviour>`, answered in process."""

    def __init__(self, model: FakeModel | None = None) -> None:
        self._model = model or FakeModel()

    async def complete(self, call: UpstreamCall) -> dict[str, Any]:
        behaviour = behaviour_for(call.model)
        _check(call.body)
        if behaviour.delay:
            await asyncio.sleep(behaviour.delay)
        if behaviour.kind == "error":
            raise _error(behaviour)
        return self._model.completion(behaviour, call.body)

    async def stream(self, call: UpstreamCall) -> AsyncIterator[dict[str, Any]]:
        behaviour = behaviour_for(call.model)
        _check(call.body)  # like an error behaviour: from the first __anext__
        if behaviour.kind == "error":
            raise _error(behaviour)  # from the first __anext__, before any chunk
        chunks = self._model.chunks(behaviour, call.body)
        pause = stream_pause(behaviour, len(chunks))
        for chunk in chunks:
            if pause:
                await asyncio.sleep(pause)
            yield chunk


def stream_pause(behaviour: Behaviour, chunk_count: int) -> float:
    """Seconds to wait before each chunk so a slow stream takes `behaviour.delay` in all."""
    return behaviour.delay / chunk_count if chunk_count else 0.0


def _error(behaviour: Behaviour) -> UpstreamError:
    body = error_body(behaviour)
    return UpstreamError(body["error"]["message"], status=behaviour.status, upstream_body=body)


def _check(body: dict[str, Any]) -> None:
    problem = request_problem(body)
    if problem is not None:
        raise UpstreamError(problem[0], status=400,
                            upstream_body=bad_request_body(*problem))


def _new_id() -> str:
    return "chatcmpl-fake-" + uuid.uuid4().hex[:20]


def _last_user_text(messages: list[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return text_of(message.get("content"))
    return ""


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part["text"] for part in content if isinstance(part, dict)
                       and part.get("type") == "text" and isinstance(part.get("text"), str))
    return ""


def cut_at_stop(text: str, stops: list[Any]) -> tuple[str, str | None]:
    """`text` up to the first of `stops` that occurs in it, and that stop (None: none does)."""
    found = [(text.find(s), i, s) for i, s in enumerate(stops)
             if isinstance(s, str) and s and s in text]
    if not found:
        return text, None
    at, _, stop = min(found)
    return text[:at], stop


def pieces(text: str) -> list[str]:
    """`text` cut into at most a few pieces (none if empty) that join back to it exactly."""
    if not text:
        return []
    size = -(-len(text) // _CHUNK_PIECES)
    return [text[i:i + size] for i in range(0, len(text), size)]
