"""ports.Upstream straight to Anthropic's Messages API, for a Messages-door request to an
`anthropic/` route: same-dialect pass-through (the rule: `endpoint.anthropic_endpoint`).

- The request is the client's own body (`call.native`) with `model` set to the upstream's
  name, `stream` set for the call, and `system` and `messages` made from the call's rewritten
  messages (gateway/core/dialects/anthropic_outbound.py: the client's messages as it sent them,
  memory's blocks in `system`, `is_error` on the tool results it flagged). Every other field
  — tools, tool_choice, stop_sequences, thinking, metadata, ... — goes as the client sent it,
  untranslated. The client's `anthropic-version` (default 2023-06-01) and `anthropic-beta`
  headers go with it; the key as `x-api-key`: the route's (api_key_env), else
  ANTHROPIC_API_KEY, as litellm's Anthropic provider reads it.
- The answer goes back to the client as the upstream sent it: a message's bytes
  (`NativeCompletion.payload`); each stream event's `data` bytes, written under its own
  `event:` name (`NativeChunk`). The pipeline reads the same answer in the chat form
  (gateway/core/dialects/anthropic_inbound.py) for the reply it records and the usage.
- Errors as on the OpenAI direct path (gateway/upstream/direct.py, whose connection pool this
  shares): an error answer keeps its status and Anthropic's error body; a timeout is a 504;
  an upstream not reached a 502 `upstream_unreachable`, retried once; an `error` event
  mid-stream ends the stream with that error.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from gateway.core.dialects.anthropic_inbound import EventReader, completion_from_message
from gateway.core.dialects.anthropic_outbound import (anthropic_request, errored_tool_uses,
                                                     tool_result_marks)
from gateway.core.messages import Message
from gateway.errors import UpstreamError
from gateway.ports import NativeChunk, NativeCompletion, UpstreamCall
from gateway.upstream.direct import (DirectUpstream, answered_error, json_bytes, json_object,
                                     read_answer, transport_error)
from gateway.upstream.endpoint import anthropic_endpoint
from gateway.upstream.sse import data_payloads

ANTHROPIC_VERSION = "2023-06-01"
_ERROR_STATUS = {"overloaded_error": 529, "rate_limit_error": 429, "api_error": 500,
                 "invalid_request_error": 400}


class DirectAnthropic:
    """Messages API calls over the pool of a `DirectUpstream`; takes only calls with an
    Anthropic `native` request that `anthropic_endpoint` routes here."""

    def __init__(self, pool: DirectUpstream) -> None:
        self._pool = pool

    async def complete(self, call: UpstreamCall) -> dict[str, Any]:
        content = await read_answer(await self._send(call, stream=False))
        message = json_object(content)
        if message is None or message.get("type") != "message":
            raise UpstreamError("The upstream's answer is not a Messages API message.")
        completion = NativeCompletion(completion_from_message(message))
        completion.payload = content
        return completion

    async def stream(self, call: UpstreamCall) -> AsyncIterator[NativeChunk]:
        response = await self._send(call, stream=True)
        reader = EventReader()
        try:
            if not 200 <= response.status < 300:
                raise answered_error(response.status, await response.read())
            async for payload in data_payloads(response.content.iter_any()):
                event = json_object(payload)
                if event is None or not isinstance(event.get("type"), str):
                    raise UpstreamError("The upstream sent a stream event that is not a "
                                        "Messages API event.")
                if event["type"] == "error":
                    raise _stream_error(event)
                yield NativeChunk(reader.chunk(event), b"event: " + event["type"].encode()
                                  + b"\ndata: " + payload + b"\n\n")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise transport_error(exc) from exc
        finally:
            response.release()

    async def _send(self, call: UpstreamCall, *, stream: bool) -> aiohttp.ClientResponse:
        endpoint = anthropic_endpoint(call.model, call.api_base, call.extra)
        if endpoint is None or call.native is None or call.native.dialect != "anthropic":
            raise ValueError(f"{call.model!r} is not an Anthropic pass-through call")
        body = request_body(call, endpoint.model, stream=stream)
        headers = {"content-type": "application/json", "accept": "application/json",
                   "anthropic-version": call.native.headers.get("anthropic-version")
                   or ANTHROPIC_VERSION}
        if call.native.headers.get("anthropic-beta"):
            headers["anthropic-beta"] = call.native.headers["anthropic-beta"]
        key = call.api_key if call.api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
        if key:
            headers["x-api-key"] = key
        return await self._pool.post(endpoint.url, body, headers, call.timeout)


def request_body(call: UpstreamCall, model: str, *, stream: bool) -> bytes:
    """The client's Messages body with the call's rewritten messages, as sent upstream."""
    assert call.native is not None
    native = call.native.body
    messages = [Message.from_openai(m) for m in call.body.get("messages") or []]
    system, turns = anthropic_request(messages, errored_tool_uses(native),
                                      tool_result_marks(native))
    body = {**native, "model": model, "messages": turns}
    if system:
        body["system"] = system
    else:
        body.pop("system", None)
    if stream:
        body["stream"] = True
    else:
        body.pop("stream", None)
    return json_bytes(body)


def _stream_error(event: dict[str, Any]) -> UpstreamError:
    error = event.get("error") if isinstance(event.get("error"), dict) else {}
    return UpstreamError(str(error.get("message") or "The upstream failed mid-stream."),
                         status=_ERROR_STATUS.get(error.get("type"), 502), upstream_body=event)
