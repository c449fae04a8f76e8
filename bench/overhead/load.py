"""The load generator: a fixed number of requests at a fixed concurrency over one aiohttp
session, recording each request's latency (non-streaming: until the whole body is read;
streaming: time to the first body bytes, and the total too). Bodies are encoded once, before
the clock runs: a 300-turn history is ~240 kB of JSON, which the generator would otherwise
re-encode for every request on the core it shares with the fake upstream.

aiohttp rather than httpx: on these machines httpx's client costs ~2 ms of CPU per request and
collapsed at concurrency 100, which would measure the client instead of the server.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import aiohttp

from bench.overhead.stack import Target

# Headers where servers report their own overhead; collected when present, for diagnosis.
OVERHEAD_HEADERS = ("x-gateway-overhead-ms", "x-litellm-overhead-duration-ms")


@dataclass
class LoadResult:
    """What one bounded run of requests measured. Latencies are in milliseconds; `latency_ms`
    is the figure reported (time to first byte when streaming)."""

    latency_ms: list[float] = field(default_factory=list)
    total_ms: list[float] = field(default_factory=list)
    server_overhead_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def n(self) -> int:
        return len(self.latency_ms)

    @property
    def rps(self) -> float:
        return self.n / self.wall_s if self.wall_s > 0 else 0.0

    def extend(self, other: LoadResult) -> None:
        self.latency_ms += other.latency_ms
        self.total_ms += other.total_ms
        self.server_overhead_ms += other.server_overhead_ms
        self.errors += other.errors
        self.wall_s += other.wall_s


@dataclass(frozen=True)
class Bodies:
    """Request bodies, pre-encoded; request i of a run sends `encoded[i % len(encoded)]`."""

    encoded: tuple[bytes, ...]
    stream: bool

    @classmethod
    def of(cls, bodies: Sequence[dict[str, Any]]) -> Bodies:
        if not bodies:
            raise ValueError("no request bodies")
        streams = {bool(b.get("stream")) for b in bodies}
        if len(streams) != 1:
            raise ValueError("bodies of one run must all stream or all not")
        return cls(tuple(encode(b) for b in bodies), streams.pop())

    def __getitem__(self, i: int) -> bytes:
        return self.encoded[i % len(self.encoded)]

    @property
    def size(self) -> int:
        """Bytes of the first body (the variants differ only in their last message)."""
        return len(self.encoded[0])


def request_body(content: str | Sequence[dict[str, Any]], *, stream: bool,
                 model: str = "echo") -> dict[str, Any]:
    """A chat request: one user message, or the given messages."""
    messages = ([{"role": "user", "content": content}] if isinstance(content, str)
                else list(content))
    body: dict[str, Any] = {"model": model, "messages": messages}
    if stream:
        body["stream"] = True
    return body


STREAM_ENDS = {"chat": b"data: [DONE]", "anthropic": b'"type":"message_stop"}',
               "responses": b'"type":"response.completed"'}
"""How each door's stream ends (the Responses one: its last event, whose data carries the
whole response, starts with this)."""


def stream_ended(payload: bytes, dialect: str) -> bool:
    end = STREAM_ENDS[dialect]
    if dialect == "responses":
        last = payload.rstrip().rsplit(b"\n\n", 1)[-1]
        return end in last[:200]
    return payload.rstrip().endswith(end)


def encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


JSON_HEADERS = {"Content-Type": "application/json"}


def new_session(concurrency: int, timeout_s: float) -> aiohttp.ClientSession:
    """One keep-alive connection per concurrent request; `timeout_s` bounds each request."""
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency,
                                     force_close=False, enable_cleanup_closed=True)
    return aiohttp.ClientSession(connector=connector,
                                 timeout=aiohttp.ClientTimeout(total=timeout_s))


async def run_load(session: aiohttp.ClientSession, target: Target, bodies: Bodies, *,
                   requests: int, concurrency: int, deadline_s: float) -> LoadResult:
    """Send exactly `requests` requests (fewer only if `deadline_s` passes first) with at most
    `concurrency` in flight. Failed requests are counted in `errors`, not in the latencies."""
    result = LoadResult()
    sent = 0
    stop_at = time.monotonic() + deadline_s

    async def worker() -> None:
        nonlocal sent
        while sent < requests and time.monotonic() < stop_at:
            i, sent = sent, sent + 1  # single-threaded event loop: no await in between
            await _one(session, target, bodies[i], bodies.stream, result)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, requests)))))
    result.wall_s = time.perf_counter() - started
    if sent < requests:
        result.errors.append(f"deadline of {deadline_s:.0f} s reached, {requests - sent} not "
                             "sent")
    return result


async def _one(session: aiohttp.ClientSession, target: Target, body: bytes,
               stream: bool, result: LoadResult) -> bytes | None:
    """One timed request; returns the response body when it succeeded."""
    started = time.perf_counter()
    try:
        async with session.post(target.url, data=body,
                                headers={**JSON_HEADERS, **target.headers}) as response:
            if stream:
                first = await response.content.readany()
                first_at = time.perf_counter()
                rest = await response.read()
                payload = first + rest
            else:
                payload = await response.read()
                first_at = time.perf_counter()
            done = time.perf_counter()
            if response.status != 200:
                result.errors.append(f"HTTP {response.status}: {payload[:200]!r}")
                return None
            if stream and not stream_ended(payload, target.dialect):
                result.errors.append(f"stream did not end as a {target.dialect} stream does: "
                                     f"{payload[-200:]!r}")
                return None
            result.latency_ms.append((first_at - started) * 1000)
            result.total_ms.append((done - started) * 1000)
            for name in OVERHEAD_HEADERS:
                if name in response.headers:
                    result.server_overhead_ms.append(float(response.headers[name]))
                    break
            return payload
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
        result.errors.append(f"{type(exc).__name__}: {exc}")
        return None


async def run_stateless_client(session: aiohttp.ClientSession, target: Target,
                               history: list[dict[str, Any]], questions: Sequence[str], *,
                               deadline_s: float) -> LoadResult:
    """A stateless chat client at concurrency 1: each request sends `history` plus the next
    question, and the question and the reply are then appended to `history` (in place: the
    caller's client continues where this run stopped). Non-streaming."""
    result = LoadResult()
    stop_at = time.monotonic() + deadline_s
    started = time.perf_counter()
    for i, question in enumerate(questions):
        if time.monotonic() >= stop_at:
            result.errors.append(f"deadline of {deadline_s:.0f} s reached, "
                                 f"{len(questions) - i} not sent")
            break
        asked = {"role": "user", "content": question}
        payload = await _one(session, target,
                             encode(request_body([*history, asked], stream=False)), False, result)
        if payload is None:
            break  # the client's history no longer matches what was stored; stop here
        reply = json.loads(payload)["choices"][0]["message"]
        history += [asked, {"role": "assistant", "content": reply.get("content")}]
    result.wall_s = time.perf_counter() - started
    return result
