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

The client is an aiohttp session (cheaper per call than httpx's client: docs/decisions.md,
"The direct upstream uses aiohttp"; litellm depends on aiohttp already). It is made on first
use, inside the serving event loop it is bound to, and closed with `aclose` (the app's
lifespan).
"""

from __future__ import annotations

import json
import logging
import os
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
from aiohttp.abc import AbstractResolver

from gateway.errors import UpstreamError, UpstreamTimeout
from gateway.ports import RawChunk, UpstreamCall
from gateway.upstream.endpoint import Endpoint, openai_endpoint
from gateway.upstream.sse import data_payloads

log = logging.getLogger(__name__)

# The openai SDK's own pool size (httpx max_connections), so the direct path holds as many
# connections as the litellm path did; idle ones are kept as long as httpx kept them.
POOL_SIZE = 1000
KEEPALIVE_SECONDS = 5.0
_DONE = b"[DONE]"


class DirectUpstream:
    """OpenAI-compatible chat completions over a pooled `aiohttp.ClientSession`.

    Takes only calls `openai_endpoint` routes direct (a ValueError otherwise: a routing bug).
    `resolver` replaces DNS for the upstreams' host names (tests point them at loopback).
    """

    def __init__(self, *, resolver: AbstractResolver | None = None) -> None:
        self._resolver = resolver
        self._session: aiohttp.ClientSession | None = None

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def complete(self, call: UpstreamCall) -> dict[str, Any]:
        content = await read_answer(await self._send(call, stream=False))
        completion = json_object(content)
        if completion is None:
            raise UpstreamError("The upstream's answer is not a JSON chat completion.")
        return completion

    async def stream(self, call: UpstreamCall) -> AsyncIterator[RawChunk]:
        # An async generator: nothing runs until the first __anext__, so an upstream that
        # refuses the request raises there, before the caller has committed to a status.
        response = await self._send(call, stream=True)
        try:
            if not 200 <= response.status < 300:
                raise answered_error(response.status, await response.read())
            done = False
            async for payload in data_payloads(response.content.iter_any()):
                # After [DONE], read on to the end of the body (there is normally nothing
                # left) so the connection goes back to the pool, as the openai SDK does.
                done = done or payload == _DONE
                if not done:
                    yield RawChunk(_chunk(payload), payload)
        except (aiohttp.ClientError, TimeoutError) as exc:  # reading, or mid-stream
            raise transport_error(exc) from exc
        finally:
            # Read to its end, the connection goes back to the pool; a stream left early (the
            # client hung up) is closed, which ends the upstream's generation.
            response.release()

    async def _send(self, call: UpstreamCall, *, stream: bool) -> aiohttp.ClientResponse:
        """POST the call; returns once the answer's headers are in (its body unread)."""
        endpoint = openai_endpoint(call.model, call.api_base, call.extra)
        if endpoint is None:
            raise ValueError(f"{call.model!r} is not a direct-path model")
        return await self.post(endpoint.url, _body(call, endpoint, stream=stream),
                               _headers(call), call.timeout)

    async def post(self, url: str, body: bytes, headers: dict[str, str],
                   timeout_seconds: float) -> aiohttp.ClientResponse:
        """POST over the pool (retried once if the upstream was not reached); returns once the
        answer's headers are in, its body unread. Shared with the Anthropic direct path."""
        # Per connect and per read, never a total: a long stream is not cut while it flows.
        timeout = aiohttp.ClientTimeout(total=None, connect=timeout_seconds,
                                        sock_connect=timeout_seconds, sock_read=timeout_seconds)
        session = self._client()
        for attempt in (1, 2):
            try:
                return await session.post(url, data=body, headers=headers,
                                          timeout=timeout, allow_redirects=False)
            except (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError) as exc:
                # a bad api_base in the config: no second try
                raise UpstreamError(f"Could not reach the upstream model: {exc}", status=502,
                                    code="upstream_unreachable") from exc
            except (aiohttp.ClientError, TimeoutError) as exc:
                error = transport_error(exc)
                if attempt == 1 and error.code == "upstream_unreachable":
                    log.warning("upstream unreachable, retrying once: %s", error.message)
                    continue
                raise error from exc
        raise AssertionError("unreachable")

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=POOL_SIZE, limit_per_host=0,
                                             keepalive_timeout=KEEPALIVE_SECONDS,
                                             resolver=self._resolver)
            # Proxies from the environment (HTTPS_PROXY, NO_PROXY …) are used, as httpx and
            # the openai SDK under litellm use them; only when one is set, since aiohttp
            # re-reads the environment (and ~/.netrc) for every request when asked to.
            self._session = aiohttp.ClientSession(
                connector=connector, trust_env=bool(urllib.request.getproxies()))
        return self._session


def _body(call: UpstreamCall, endpoint: Endpoint, *, stream: bool) -> bytes:
    body = {**call.body, "model": endpoint.model}
    if stream:
        body["stream"] = True
        if "stream_options" in body and body["stream_options"] is None:
            del body["stream_options"]  # litellm sends them only when set
    else:
        body.pop("stream", None)
    return json_bytes(body)


def json_bytes(body: dict[str, Any]) -> bytes:
    """A request body as compact UTF-8 JSON (orjson; `json` for what orjson refuses: an
    integer past 64 bits, a lone surrogate, which is then sent escaped)."""
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError:
        pass
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
    chunk = json_object(payload)
    if chunk is None:
        raise UpstreamError("The upstream sent a stream event that is not a JSON chunk.")
    if isinstance(chunk.get("error"), dict):
        # An error event in the stream (vLLM, LiteLLM-style proxies); the openai SDK under
        # litellm raises on it too.
        error = chunk["error"]
        raise UpstreamError(str(error.get("message") or "The upstream failed mid-stream."),
                            upstream_body=chunk)
    return chunk


async def read_answer(response: aiohttp.ClientResponse) -> bytes:
    """A whole answer's body, the connection released; an error status raises the
    upstream's error (`answered_error`)."""
    try:
        content = await response.read()
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise transport_error(exc) from exc
    finally:
        response.release()
    if not 200 <= response.status < 300:
        raise answered_error(response.status, content)
    return content


def json_object(content: bytes) -> dict[str, Any] | None:
    try:
        data = json.loads(content)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def answered_error(status: int, content: bytes) -> UpstreamError:
    """The upstream's error answer: its status, and its body when in OpenAI's error shape."""
    data = json_object(content)
    body = data if data is not None and isinstance(data.get("error"), dict) else None
    message = body["error"].get("message") if body else None
    return UpstreamError(str(message or f"The upstream answered HTTP {status}."),
                         # a redirect (not followed) is no error status to give the client
                         status=status if 400 <= status <= 599 else 502, upstream_body=body)


def transport_error(exc: BaseException) -> UpstreamError:
    """aiohttp's failures as httpx's were mapped: a timeout (connect or read) is a 504; a
    connection refused, reset or dropped (before or during the answer) is an upstream not
    reached; anything else is an answer that could not be read."""
    if isinstance(exc, TimeoutError):  # aiohttp's ServerTimeoutError is one too
        return UpstreamTimeout()
    if isinstance(exc, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)):
        return UpstreamError(f"Could not reach the upstream model: {exc!r}", status=502,
                             code="upstream_unreachable")
    return UpstreamError(f"The upstream's answer could not be read: {exc!r}", status=502)
