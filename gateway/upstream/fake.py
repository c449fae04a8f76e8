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
- `agent` — a step of an agent's tool loop: one call of the request's first tool with
  `{"step": <number of messages>}` as arguments and finish_reason `tool_calls`, its id derived
  from the messages (the same request gets the same id); `echo` if the request sent no tools.
- `<name>-ctx<n>` (e.g. `agent-ctx16000`, `echo-ctx8000`) — behaviour `<name>` with a context
  window of n tokens instead of the default (128,000 here, 200,000 in the Messages form).

Requests are held to OpenAI's documented rules (gateway/upstream/provider_rules.py): a `tool`
message answers a call of the assistant message just before it, every call is answered, the
prompt fits the window (else `context_length_exceeded`); a request that breaks one gets the
400 OpenAI answers, in its wording, whatever the behaviour.

Each request is kept, oldest first, the last 1,000: `{"path": "/v1/chat/completions",
"body": <the body received>}`, with `"status"` when the answer was not 200 (a rejected
request: 400). In process as `FakeUpstream.received`, on the server at `GET /fake/received`.

`stop`: an echoed text that holds a stop sequence is cut before the first that occurs;
finish_reason is `stop` and the choice says which sequence in `stop_reason`, as vLLM's
OpenAI-compatible server does (OpenAI's own API does not say).

The same behaviours answer in Anthropic's Messages form at the fake server's `/v1/messages`
(gateway/upstream/fake_messages.py).

Usage is counted with cl100k as OpenAI counts a chat prompt (message texts, tool calls'
names and arguments, the tools' JSON), the same count the window is checked against. A stream
asked for its usage (`stream_options.include_usage`) ends with the usage chunk and carries
`"usage": null` in every other chunk, as OpenAI's does.

Responses say they are fake (`model: fake/<name>`, `system_fingerprint: context-gateway-fake`)
and are deterministic except for ids (but `agent`'s tool call ids) and timestamps.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, AsyncIterator

from gateway.errors import UpstreamError
from gateway.ports import UpstreamCall
from gateway.upstream.provider_rules import OPENAI_WINDOW, openai_problem

FINGERPRINT = "context-gateway-fake"
SLOW_DEFAULT_SECONDS = 2.0
BEHAVIOURS = ("echo", "echo-messages", "slow", "slow-250", "error", "error-429", "error-400",
              "error-503", "tool-call", "agent")
"""Names listed by the fake server's /v1/models (any name works)."""

RECEIVED_KEPT = 1_000
CHAT_PATH = "/v1/chat/completions"

_CHUNK_PIECES = 4
_WINDOW_SUFFIX = re.compile(r"^(.+)-ctx([0-9]+)$")
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
    """One of echo, echo-messages, tool-call, agent, error."""
    delay: float = 0.0
    status: int = 200
    cached: int = 0
    """Prompt tokens reported as read from a cache (`cached-<n>`)."""
    window: int | None = None
    """The context window in tokens (`-ctx<n>`); None: the dialect's default."""


def behaviour_for(model: str) -> Behaviour:
    name = model.removeprefix("fake/")
    sized = _WINDOW_SUFFIX.match(name)
    if sized is not None:
        return replace(behaviour_for(sized.group(1)), name=name, window=int(sized.group(2)))
    if name in ("echo-messages", "tool-call", "agent"):
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


def bad_request_body(message: str, param: str | None, code: str | None = None
                     ) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": param,
                      "code": code}}


def keep(received: list[dict[str, Any]], path: str, body: Any, status: int = 200) -> None:
    """Append a received request to `received` (`status` only when not 200), keeping the
    last RECEIVED_KEPT."""
    entry: dict[str, Any] = {"path": path, "body": body}
    if status != 200:
        entry["status"] = status
    received.append(entry)
    del received[:-RECEIVED_KEPT]


def call_id(messages: Any, prefix: str) -> str:
    """A tool call id derived from the messages: deterministic, and distinct for each
    history an agent's session sends."""
    canonical = json.dumps(messages, sort_keys=True, default=str)
    return prefix + hashlib.sha256(canonical.encode()).hexdigest()[:24]


class FakeModel:
    """Turns a chat request into the fake's OpenAI-shaped answer (no I/O, no sleeping)."""

    def __init__(self) -> None:
        self._encoding: Any = None  # tiktoken cl100k, loaded on first count

    def count(self, text: str) -> int:
        if self._encoding is None:
            import tiktoken  # offline: gateway._offline points its cache at litellm's files

            self._encoding = tiktoken.get_encoding("cl100k_base")
        return len(self._encoding.encode(text, disallowed_special=()))

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        """The prompt's tokens as OpenAI counts a chat prompt: 3 of reply priming, then per
        message 3, its role and its text (content, tool calls' names and arguments); the
        tools' JSON."""
        total = 3
        for message in body.get("messages") or []:
            if isinstance(message, dict):
                total += 3 + self.count(str(message.get("role", "")))
                total += self.count(_chat_text(message))
        tools = body.get("tools")
        if tools:
            total += self.count(json.dumps(tools, ensure_ascii=False))
        return total

    def problem(self, behaviour: Behaviour, body: dict[str, Any]
                ) -> tuple[int, tuple[str, str, str | None] | None]:
        """The prompt's tokens, and (message, param, code) of OpenAI's 400 if `body` breaks
        one of its rules (provider_rules.openai_problem) or None."""
        tokens = self.prompt_tokens(body)
        return tokens, openai_problem(body, tokens, behaviour.window or OPENAI_WINDOW)

    def completion(self, behaviour: Behaviour, body: dict[str, Any],
                   prompt_tokens: int | None = None) -> dict[str, Any]:
        """A `chat.completion`; the caller handles `error` behaviours (see `error_body`).
        `prompt_tokens`: the prompt's count if the caller has it."""
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
            "usage": self._usage(body, content, tool_call, behaviour.cached, prompt_tokens),
        }

    def chunks(self, behaviour: Behaviour, body: dict[str, Any],
               prompt_tokens: int | None = None) -> list[dict[str, Any]]:
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
                        "usage": self._usage(body, content, tool_call, behaviour.cached,
                                             prompt_tokens)})
        return out

    def _reply(self, behaviour: Behaviour, body: dict[str, Any]
               ) -> tuple[str | None, dict[str, Any] | None, str | None]:
        """The text or the tool call, and the stop sequence the text was cut at."""
        messages = body.get("messages") or []
        if behaviour.kind == "echo-messages":
            return json.dumps(messages, ensure_ascii=False), None, None
        text = _last_user_text(messages)
        tools = body.get("tools") or []
        name = "echo"
        if tools and isinstance(tools[0], dict):
            name = (tools[0].get("function") or {}).get("name") or name
        if behaviour.kind == "tool-call":
            arguments = json.dumps({"input": text}, ensure_ascii=False)
            return None, {"id": "call_" + uuid.uuid4().hex[:24], "type": "function",
                          "function": {"name": name, "arguments": arguments}}, None
        if behaviour.kind == "agent" and tools:
            arguments = json.dumps({"step": len(messages)})
            return None, {"id": call_id(messages, "call_"), "type": "function",
                          "function": {"name": name, "arguments": arguments}}, None
        stop = body.get("stop")
        text, matched = cut_at_stop(text, [stop] if isinstance(stop, str) else stop or [])
        return text, None, matched

    def _usage(self, body: dict[str, Any], content: str | None,
               tool_call: dict[str, Any] | None, cached: int = 0,
               prompt_tokens: int | None = None) -> dict[str, Any]:
        prompt = self.prompt_tokens(body) if prompt_tokens is None else prompt_tokens
        reply = content if tool_call is None else tool_call["function"]["arguments"]
        completion = self.count(reply or "")
        usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                                 "total_tokens": prompt + completion}
        if cached:
            usage["prompt_tokens_details"] = {"cached_tokens": min(cached, prompt)}
        return usage


class FakeUpstream:
    """ports.Upstream for model strings `fake/<behaviour>`, answered in process.

    `received`: the request bodies it was called with, oldest first, the last 1,000, as the
    fake server's `GET /fake/received` lists them (see `keep`)."""

    def __init__(self, model: FakeModel | None = None) -> None:
        self._model = model or FakeModel()
        self.received: list[dict[str, Any]] = []

    async def complete(self, call: UpstreamCall) -> dict[str, Any]:
        behaviour = behaviour_for(call.model)
        tokens = self._admit(behaviour, call.body)
        if behaviour.delay:
            await asyncio.sleep(behaviour.delay)
        return self._model.completion(behaviour, call.body, tokens)

    async def stream(self, call: UpstreamCall) -> AsyncIterator[dict[str, Any]]:
        behaviour = behaviour_for(call.model)
        # like an error behaviour, a rejection is raised from the first __anext__
        tokens = self._admit(behaviour, call.body)
        chunks = self._model.chunks(behaviour, call.body, tokens)
        pause = stream_pause(behaviour, len(chunks))
        for chunk in chunks:
            if pause:
                await asyncio.sleep(pause)
            yield chunk

    def _admit(self, behaviour: Behaviour, body: dict[str, Any]) -> int:
        """The prompt's tokens; keeps the request, and raises the error a real upstream would
        answer (a malformed field or a broken rule: 400) or the behaviour's error."""
        shape = request_problem(body)
        tokens, rule = (0, None) if shape is not None else self._model.problem(behaviour, body)
        problem = shape or rule
        if problem is not None:
            keep(self.received, CHAT_PATH, body, 400)
            error = bad_request_body(*problem)
            raise UpstreamError(error["error"]["message"], status=400, upstream_body=error)
        keep(self.received, CHAT_PATH, body, behaviour.status)
        if behaviour.kind == "error":
            error = error_body(behaviour)
            raise UpstreamError(error["error"]["message"], status=behaviour.status,
                                upstream_body=error)
        return tokens


def stream_pause(behaviour: Behaviour, chunk_count: int) -> float:
    """Seconds to wait before each chunk so a slow stream takes `behaviour.delay` in all."""
    return behaviour.delay / chunk_count if chunk_count else 0.0


def _new_id() -> str:
    return "chatcmpl-fake-" + uuid.uuid4().hex[:20]


def _last_user_text(messages: list[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return text_of(message.get("content"))
    return ""


def _chat_text(message: dict[str, Any]) -> str:
    """A chat message's text as the fake counts it: its content's text, then each tool
    call's name and arguments."""
    parts = [text_of(message.get("content"))]
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            parts += [str(function.get("name") or ""), str(function.get("arguments") or "")]
    return "\n".join(p for p in parts if p)


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
