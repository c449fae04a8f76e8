"""The soak's load: every client sends its next turn on its own steady beat (together
`rate` requests per second), and a sampler reads the resident memory of the gateway's
processes every `sample_seconds` until the deadline."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from bench.machine import rss_mb
from bench.soak.traffic import Client

RETIRE_EVERY_S = 30.0
"""How often idle conversations are looked for when conversations are retired."""


@dataclass
class Tally:
    """What the run saw: latencies and outcomes per door, errors, RSS samples."""

    latencies_ms: dict[str, list[float]] = field(default_factory=dict)
    outcomes: Counter[str] = field(default_factory=Counter)
    error_examples: list[str] = field(default_factory=list)
    rss: list[dict[str, float]] = field(default_factory=list)
    """{"t": seconds since the warm-up ended (negative before), process name: MB ...}."""

    def error(self, text: str) -> None:
        self.outcomes["error"] += 1
        if len(self.error_examples) < 10:
            self.error_examples.append(text)



async def drive(base_url: str, clients: list[Client], rate: float, warmup_s: float,
                duration_s: float, sample_s: float, processes: Callable[[], dict[str, int]],
                tally: Tally, retire_after_s: float | None = None) -> None:
    """Run the load for `warmup_s + duration_s`; latencies count from the end of the warm-up.
    With `retire_after_s`, every user's conversations idle that long are deleted through the
    user control API as the run goes (`retirer`)."""
    started = time.monotonic()
    measure_from = started + warmup_s
    stop_at = measure_from + duration_s
    interval = len(clients) / rate

    async def client_loop(client: Client, session: aiohttp.ClientSession) -> None:
        await asyncio.sleep(interval * client.index / len(clients))
        beat = time.monotonic()
        while beat < stop_at:
            body, headers, stream = client.next_request()
            t0 = time.monotonic()
            try:
                async with session.post(base_url + client.path, json=body,
                                        headers=headers) as response:
                    payload = await response.read()
                if response.status != 200:
                    client.history.pop()
                    tally.error(f"{client.door} HTTP {response.status}: {payload[:160]!r}")
                elif not client.read_answer(payload, stream):
                    tally.error(f"{client.door}: incomplete answer {payload[-160:]!r}")
                else:
                    tally.outcomes[client.door] += 1
                    if t0 >= measure_from:
                        tally.latencies_ms.setdefault(client.door, []).append(
                            (time.monotonic() - t0) * 1000)
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                client.history.pop()
                tally.error(f"{client.door} {type(exc).__name__}: {exc}")
            beat += interval
            await asyncio.sleep(max(0.0, beat - time.monotonic()))

    async def sampler(session: aiohttp.ClientSession) -> None:
        next_at = started
        while True:
            now = time.monotonic()
            sample = {"t": round(now - measure_from, 1)}
            for name, pid in processes().items():
                mb = rss_mb(pid)
                if mb is not None:
                    sample[name] = round(mb, 1)
            held = await index_bytes(session, base_url)
            if held is not None:
                sample["indexes"] = round(held / 1e6, 1)
            tally.rss.append(sample)
            if now >= stop_at:
                return
            # One sample at the end of the warm-up exactly, then every sample_s.
            next_at = measure_from if next_at < measure_from <= next_at + sample_s \
                else next_at + sample_s
            await asyncio.sleep(max(0.0, min(next_at, stop_at) - time.monotonic()))

    connector = aiohttp.TCPConnector(limit=len(clients))
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=60)) as session:
        retiring = [] if retire_after_s is None else \
            [retirer(session, base_url, clients, retire_after_s, stop_at, tally)]
        await asyncio.gather(sampler(session), *retiring,
                             *(client_loop(c, session) for c in clients))


async def retirer(session: aiohttp.ClientSession, base_url: str, clients: list[Client],
                  idle_s: float, stop_at: float, tally: Tally) -> None:
    """Every `RETIRE_EVERY_S` until `stop_at`: `retire_idle` the conversations not updated for
    `idle_s`, so that what the users hold stops growing — a soak of a steady amount of memory."""
    users = sorted({(c.key, c.user) for c in clients})
    while time.monotonic() < stop_at:
        await asyncio.sleep(RETIRE_EVERY_S)
        await retire_idle(session, base_url, users, time.time() - idle_s, tally)


async def retire_idle(session: aiohttp.ClientSession, base_url: str,
                      users: list[tuple[str, str]], before: float, tally: Tally) -> None:
    """Delete each of `users`' (API key, user id) conversations last updated before `before`
    (a Unix time) through the user control API (`GET /v1/memory/conversations`, then `DELETE`
    each); counted as `retired`, a failure as an error."""
    for key, user in users:
        headers = {"Authorization": f"Bearer {key}", "X-User-Id": user}
        try:
            for conversation in await idle_conversations(session, base_url, headers, before):
                async with session.delete(f"{base_url}/v1/memory/conversations/{conversation}",
                                          headers=headers) as response:
                    await response.read()
                if response.status == 200:
                    tally.outcomes["retired"] += 1
                else:
                    tally.error(f"retire {conversation}: HTTP {response.status}")
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            tally.error(f"retire: {type(exc).__name__}: {exc}")


async def idle_conversations(session: aiohttp.ClientSession, base_url: str,
                             headers: dict[str, str], before: float) -> list[str]:
    """The ids of the user's conversations last updated before `before` (a Unix time)."""
    idle: list[str] = []
    after: str | None = None
    while True:
        params = {"limit": "100", **({} if after is None else {"after": after})}
        async with session.get(f"{base_url}/v1/memory/conversations", headers=headers,
                               params=params) as response:
            page = await response.json()
        idle += [c["id"] for c in page["data"]
                 if c["updated_at"] is not None and c["updated_at"] < before]
        if not page["has_more"]:
            return idle
        after = page["last_id"]


async def index_bytes(session: aiohttp.ClientSession, base_url: str) -> float | None:
    """What the serving process's search indexes hold (`gateway_memory_index_bytes`, summed
    over the indexes), or None when /metrics does not say."""
    try:
        async with session.get(base_url + "/metrics") as response:
            text = await response.text()
    except (aiohttp.ClientError, asyncio.TimeoutError):
        return None
    values = [sample.value for family in text_string_to_metric_families(text)
              if family.name == "gateway_memory_index_bytes" for sample in family.samples]
    return sum(values) if values else None
