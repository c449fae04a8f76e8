"""The load generator: a fixed number of requests at a fixed concurrency over one aiohttp
session, recording each request's latency (non-streaming: until the whole body is read;
streaming: time to the first body bytes, and the total too).

aiohttp rather than httpx: on these machines httpx's client costs ~2 ms of CPU per request and
collapsed at concurrency 100, which would measure the client instead of the server.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

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


def request_body(content: str, *, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "echo", "messages": [{"role": "user", "content": content}]}
    if stream:
        body["stream"] = True
    return body


def new_session(concurrency: int, timeout_s: float) -> aiohttp.ClientSession:
    """One keep-alive connection per concurrent request; `timeout_s` bounds each request."""
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency,
                                     force_close=False, enable_cleanup_closed=True)
    return aiohttp.ClientSession(connector=connector,
                                 timeout=aiohttp.ClientTimeout(total=timeout_s))


async def run_load(session: aiohttp.ClientSession, target: Target, body: dict[str, Any], *,
                   requests: int, concurrency: int, deadline_s: float) -> LoadResult:
    """Send exactly `requests` requests (fewer only if `deadline_s` passes first) with at most
    `concurrency` in flight. Failed requests are counted in `errors`, not in the latencies."""
    result = LoadResult()
    stream = bool(body.get("stream"))
    remaining = requests
    stop_at = time.monotonic() + deadline_s

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0 and time.monotonic() < stop_at:
            remaining -= 1  # single-threaded event loop: no await between test and decrement
            await _one(session, target, body, stream, result)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, requests)))))
    result.wall_s = time.perf_counter() - started
    if remaining > 0:
        result.errors.append(f"deadline of {deadline_s:.0f} s reached, {remaining} not sent")
    return result


async def _one(session: aiohttp.ClientSession, target: Target, body: dict[str, Any],
               stream: bool, result: LoadResult) -> None:
    started = time.perf_counter()
    try:
        async with session.post(target.url, json=body, headers=target.headers) as response:
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
                return
            if stream and not payload.rstrip().endswith(b"data: [DONE]"):
                result.errors.append(f"stream did not end with [DONE]: {payload[-200:]!r}")
                return
            result.latency_ms.append((first_at - started) * 1000)
            result.total_ms.append((done - started) * 1000)
            for name in OVERHEAD_HEADERS:
                if name in response.headers:
                    result.server_overhead_ms.append(float(response.headers[name]))
                    break
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
        result.errors.append(f"{type(exc).__name__}: {exc}")
