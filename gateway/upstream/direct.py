"""ports.Upstream straight to an OpenAI-compatible chat endpoint over one pooled HTTP client.

The fast path for the calls gateway/upstream/endpoint.py routes here (litellm's `openai`
provider). It does what LitellmUpstream does for them, minus litellm's per-call work:

- The request body is the call's body with `model` set to the upstream's name for it and
  `stream` set for the call (`stream_options` only when streaming, as litellm sends them),
  serialised once. Nothing else is added, removed or reordered.
- A non-streaming answer is returned as the upstream sent it, parsed; a stream's chunks come
  as RawChunks, so the pipeline forwards the upstream's own bytes without re-encoding them.
- Errors map as in litellm_upstream.upstream_error: an error answer keeps its status and
  OpenAI error body; a timeout (the call's `timeout`, for connecting, each read and each
  write — as the openai SDK under litellm applies it) is a 504; an upstream not reached is a
  502 `upstream_unreachable`. That last one alone is retried, once, when it happens before
  any answer arrived (a refused connection, or a pooled keep-alive connection the upstream
  had closed): the request was not processed. An error answer is never retried.
- The key is sent as `Authorization: Bearer <api_key>`: the route's (api_key_env), else
  OPENAI_API_KEY from the environment, as litellm's openai provider does — a config that
  worked through litellm works unchanged on this path. Neither: no Authorization header.

The client is built once per process (the app's lifespan) and closed with `aclose`.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, AsyncIterator

import httpx

from gateway.errors import UpstreamError, UpstreamTimeout
from gateway.ports import RawChunk, UpstreamCall
from gateway.upstream.endpoint import Endpoint, openai_endpoint
from gateway.upstream.sse import data_payloads

log = logging.getLogger(__name__)

# The openai SDK's own pool limits, so the direct path holds as many connections as the
# litellm path did.
POOL_LIMITS = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
_DONE = b"[DONE]"


class DirectUpstream:
    """OpenAI-compatible chat completions over a pooled `httpx.AsyncClient`.

    Takes only calls `openai_endpoint` routes direct (a ValueError otherwise: a routing bug).
    """

    def __init__(self, client: httpx.AsyncClient | None = None) -> None:
        self._client = client or httpx.AsyncClient(limits=POOL_LIMITS, follow_redirects=False)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def complete(self, call: UpstreamCall) -> dict[str, Any]:
        response = await self._send(call, stream=False)
        try:
            content = await response.aread()
        except httpx.HTTPError as exc:
            raise _transport_error(exc) from exc
        finally:
            await response.aclose()
        if not response.is_success:
            raise _answered_error(response.status_code, content)
        completion = _json_object(content)
        if completion is None:
            raise UpstreamError("The upstream's answer is not a JSON chat completion.")
        return completion

    async def stream(self, call: UpstreamCall) -> AsyncIterator[RawChunk]:
        # An async generator: nothing runs until the first __anext__, so an upstream that
        # refuses the request raises there, before the caller has committed to a status.
        response = await self._send(call, stream=True)
        try:
            if not response.is_success:
                raise _answered_error(response.status_code, await response.aread())
            done = False
            async for payload in data_payloads(response.aiter_bytes()):
                # After [DONE], read on to the end of the body (there is normally nothing
                # left) so the connection goes back to the pool, as the openai SDK does.
                done = done or payload == _DONE
                if not done:
                    yield RawChunk(_chunk(payload), payload)
        except httpx.HTTPError as exc:  # reading the answer, or mid-stream
            raise _transport_error(exc) from exc
        finally:
            await response.aclose()

    async def _send(self, call: UpstreamCall, *, stream: bool) -> httpx.Response:
        """POST the call; returns once the answer's headers are in (its body unread)."""
        endpoint = openai_endpoint(call.model, call.api_base, call.extra)
        if endpoint is None:
            raise ValueError(f"{call.model!r} is not a direct-path model")
        try:
            request = self._client.build_request(
                "POST", endpoint.url, content=_body(call, endpoint, stream=stream),
                headers=_headers(call), timeout=httpx.Timeout(call.timeout))
        except httpx.InvalidURL as exc:  # a bad api_base in the config
            raise UpstreamError(f"Could not reach the upstream model: {exc}", status=502,
                                code="upstream_unreachable") from exc
        for attempt in (1, 2):
            try:
                return await self._client.send(request, stream=True)
            except httpx.HTTPError as exc:
                error = _transport_error(exc)
                if attempt == 1 and error.code == "upstream_unreachable":
                    log.warning("upstream unreachable, retrying once: %s", error.message)
                    continue
                raise error from exc
        raise AssertionError("unreachable")


def _body(call: UpstreamCall, endpoint: Endpoint, *, stream: bool) -> bytes:
    body = {**call.body, "model": endpoint.model}
    if stream:
        body["stream"] = True
        if "stream_options" in body and body["stream_options"] is None:
            del body["stream_options"]  # litellm sends them only when set
    else:
        body.pop("stream", None)
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:  # a lone surrogate in the client's text: send it escaped
        return json.dumps(body, separators=(",", ":")).encode()


def _headers(call: UpstreamCall) -> dict[str, str]:
    headers = {"content-type": "application/json", "accept": "application/json"}
    key = call.api_key if call.api_key is not None else os.environ.get("OPENAI_API_KEY")
    if key:
        headers["authorization"] = f"Bearer {key}"
    return headers


def _chunk(payload: bytes) -> dict[str, Any]:
    chunk = _json_object(payload)
    if chunk is None:
        raise UpstreamError("The upstream sent a stream event that is not a JSON chunk.")
    if isinstance(chunk.get("error"), dict):
        # An error event in the stream (vLLM, LiteLLM-style proxies); the openai SDK under
        # litellm raises on it too.
        error = chunk["error"]
        raise UpstreamError(str(error.get("message") or "The upstream failed mid-stream."),
                            upstream_body=chunk)
    return chunk


def _json_object(content: bytes) -> dict[str, Any] | None:
    try:
        data = json.loads(content)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _answered_error(status: int, content: bytes) -> UpstreamError:
    """The upstream's error answer: its status, and its body when in OpenAI's error shape."""
    data = _json_object(content)
    body = data if data is not None and isinstance(data.get("error"), dict) else None
    message = body["error"].get("message") if body else None
    return UpstreamError(str(message or f"The upstream answered HTTP {status}."),
                         # a redirect (not followed) is no error status to give the client
                         status=status if 400 <= status <= 599 else 502, upstream_body=body)


def _transport_error(exc: httpx.HTTPError) -> UpstreamError:
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamTimeout()
    if isinstance(exc, httpx.TransportError):
        return UpstreamError(f"Could not reach the upstream model: {exc!r}", status=502,
                             code="upstream_unreachable")
    return UpstreamError(f"The upstream's answer could not be read: {exc!r}", status=502)
