"""Side-by-side A/B of two in-process apps: what one setting costs a request.

The console, tracing and encryption overhead benchmarks share this harness: two apps,
identical but for the setting, in one event loop; requests alternate between them, the order
swapped every round, so drift, GC and the machine's load hit both alike; the report is a
per-app latency table and the median difference (on − off).
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator

import httpx

from bench.machine import machine
from gateway.store import EmbeddedRedis
from gateway.store.recording.recorder import Recorder

Times = dict[str, list[float]]


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def history(n: int) -> list[dict[str, str]]:
    """A stateless client's `n`-message history."""
    out = []
    for i in range(n // 2):
        out.append({"role": "user", "content": f"Question {i}: what about the harbour at dusk?"})
        out.append({"role": "assistant", "content": f"Answer {i}: the lights come on one by one."})
    return out


@contextlib.contextmanager
def embedded_stores(*names: str, prefix: str = "gw-ab-") -> Iterator[dict[str, str]]:
    """An embedded store per name (in temporary directories), as name -> URL."""
    with contextlib.ExitStack() as stack:
        servers = {}
        for name in names:
            server = EmbeddedRedis(Path(stack.enter_context(
                tempfile.TemporaryDirectory(prefix=prefix))))
            server.start()
            stack.callback(server.stop)
            servers[name] = server.url
        yield servers


@contextlib.asynccontextmanager
async def running(apps: dict[str, Any]) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    """Start every app's lifespan; yield an in-process client per app."""
    async with contextlib.AsyncExitStack() as stack:
        clients = {}
        for name, app in apps.items():
            await stack.enter_async_context(app.router.lifespan_context(app))
            clients[name] = await stack.enter_async_context(httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://gateway"))
        yield clients


async def alternate(clients: dict[str, httpx.AsyncClient], requests: int, warmup: int,
                    request: Callable[[int], tuple[dict[str, Any], dict[str, str]]],
                    between: Callable[[str, httpx.Response], Awaitable[None]] | None = None
                    ) -> Times:
    """POST `request(i)` (body, headers) to /v1/chat/completions of the "off" and "on" apps in
    turn, the order swapped every round; time each; `between(name, response)` runs untimed
    after each request. The first `warmup` rounds are not kept."""
    times: Times = {name: [] for name in clients}
    for i in range(warmup + requests):
        body, headers = request(i)
        for name in (("off", "on") if i % 2 else ("on", "off")):
            started = time.perf_counter()
            response = await clients[name].post("/v1/chat/completions", json=body,
                                                headers=headers)
            elapsed = (time.perf_counter() - started) * 1000
            assert response.status_code == 200, response.text
            if i >= warmup:
                times[name].append(elapsed)
            if between is not None:
                await between(name, response)
    return times


def worker_steps(apps: dict[str, Any]) -> Callable[[str, httpx.Response],
                                                   Awaitable[None]]:
    """A `between` for apps whose recorder runs elsewhere (`recorder.mode: external`): what a
    worker process does with each turn — the recorder applies it, the memory worker processes
    it. Call with the apps' lifespans running."""
    gateways = {name: app.state.gateway for name, app in apps.items()}
    recorders = {name: Recorder(g.store.client, consumer_prefix=f"bench-{name}",
                                encryption=g.store.encryption)
                 for name, g in gateways.items()}

    async def between(name: str, response: httpx.Response) -> None:
        await recorders[name].process_available()
        memory = gateways[name].memory
        assert memory is not None
        await memory.worker.process_available()

    return between


def report(title: str, command: str, setting: str, describe: str, times: Times, *,
           note: str = "", after: tuple[str, ...] = ()) -> str:
    """The markdown report: machine, the per-app table, the median difference followed by
    `note`, then the lines `after`."""
    m = machine()
    rows = [f"| {setting} {name} | {len(t)} | {statistics.median(t):.3f} | "
            f"{quantile(t, 0.9):.3f} | {quantile(t, 0.99):.3f} |" for name, t in times.items()]
    delta = statistics.median(times["on"]) - statistics.median(times["off"])
    return "\n".join([
        f"# {title}", "",
        f"`{command}`: {m['cores']} cores, {m['cpu_model']}, Python {m['python']}.", "",
        f"Per request, ms, through the in-process app (httpx ASGI transport, fake upstream, "
        f"{describe}), off and on alternating:", "",
        "| | requests | p50 | p90 | p99 |", "|---|---:|---:|---:|---:|", *rows, "",
        f"Median difference (on − off): {delta:+.3f} ms.{' ' if note else ''}{note}", "",
        *after])
