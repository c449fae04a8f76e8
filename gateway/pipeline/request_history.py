"""The recent requests of each tenant, kept in the store for the memory console.

`Pipeline.finish` hands every finished request's `RequestLog` to `RequestHistory.add`, which
only appends a small dict to an in-process queue: the request path never waits for the store.
One flusher task writes what is queued, in one pipelined round trip per batch:
- to the tenant's request-log stream (`KeySpace.request_log`), capped with XADD MAXLEN ~;
- for a request of a conversation, that conversation's last-request diagnostics
  (`KeySpace.last_request`), with a TTL.

Invariants:
- no message content is kept: ids, numbers, block names, recalled item ids and scores only;
- bounded: at most `capacity` entries wait in process; one more drops the oldest (counted,
  logged). An entry the store cannot take is dropped too, logged: these are diagnostics, not
  user data, and a store outage must not grow them without bound;
- an entry of a request that started before its user's erase or its conversation's delete is
  not written (the tombstones are read in the round trip before the batch's; an erase that
  lands between the two is not seen): an erase leaves no entry naming the user, also of a
  request that was being answered while it ran;
- drained at shutdown (`drain`), bounded by a timeout;
- built only when `console.enabled`: otherwise the pipeline has none and does nothing.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import time
from typing import Any, Callable

import redis.asyncio as aioredis

from gateway.core.ids import ConversationKey
from gateway.ops.observability import RequestLog
from gateway.store.keys import KeySpace

logger = logging.getLogger("gateway.request_history")

Entry = dict[str, Any]
_BATCH = 200
_NUMBERS = ("tokens_original", "tokens_forwarded", "tokens_completion", "tokens_cached",
            "recent_turns",
            "summary_chunks", "recalled", "load_ms", "recall_ms", "rewrite_ms", "upstream_ms",
            "total_ms")


def entry_of(log: RequestLog, now: float) -> Entry:
    """What is kept of one request: no content, only what the console shows."""
    entry: Entry = {"time": round(now, 3), "request_id": log.request_id, "tenant": log.tenant,
                    "user": log.user, "conversation": log.conversation, "model": log.model,
                    "stream": log.stream, "status": log.status, "passthrough": log.passthrough,
                    "reconcile": log.reconcile, "memory_tokens": log.memory_tokens,
                    "memory_blocks": list(log.memory_blocks or ()),
                    "recalled_items": [{"kind": k, "id": i, "score": s}
                                       for k, i, s in log.recalled_items or ()],
                    # The type of a memory failure only: its message may quote stored text.
                    "memory_error": log.memory_error.split("(", 1)[0][:80]
                    if log.memory_error else None}
    for name in _NUMBERS:
        value = getattr(log, name)
        entry[name] = round(value, 3) if isinstance(value, float) else value
    entry["spend"], entry["whole_cost"] = log.spend, log.whole_cost  # money: not rounded
    return entry


class RequestHistory:
    def __init__(self, redis: aioredis.Redis, keys: KeySpace, *, max_entries: int,
                 last_ttl_seconds: int, capacity: int = 10_000,
                 clock: Callable[[], float] = time.time):
        self.redis = redis
        self.keys = keys
        self.max_entries = max_entries
        self.last_ttl_seconds = last_ttl_seconds
        self.clock = clock
        self._held: collections.deque[Entry] = collections.deque(maxlen=capacity)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.written = 0
        self.dropped = 0

    def add(self, log: RequestLog) -> None:
        """Queue the request (a request refused before its tenant was known is not kept)."""
        if log.tenant is None:
            return
        if len(self._held) == self._held.maxlen:
            self.dropped += 1
            logger.warning("request history full: dropped the oldest entry")
        self._held.append(entry_of(log, self.clock()))
        self._wake.set()

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(),
                                                            name="request-history")

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self.flush()

    async def flush(self) -> None:
        """Write everything queued now."""
        while self._held:
            batch = [self._held.popleft() for _ in range(min(len(self._held), _BATCH))]
            try:
                await self._write(batch)
            except Exception as exc:  # noqa: BLE001 — diagnostics: dropped, counted, logged
                self.dropped += len(batch)
                logger.warning("could not write %d request history entries: %r",
                               len(batch), exc)
            else:
                self.written += len(batch)

    async def _write(self, batch: list[Entry]) -> None:
        batch = await self._not_erased(batch)
        async with self.redis.pipeline(transaction=False) as pipe:
            for entry in batch:
                data = json.dumps(entry, ensure_ascii=False, separators=(",", ":"))
                # tenant/user/conversation as fields too: an erase finds a user's entries.
                fields = {"tenant": entry["tenant"], "user": entry["user"] or "",
                          "conversation": entry["conversation"] or "", "data": data}
                pipe.xadd(self.keys.request_log(entry["tenant"]), fields,
                          maxlen=self.max_entries, approximate=True)
                if entry["conversation"] and entry["user"]:
                    key = ConversationKey(entry["tenant"], entry["user"], entry["conversation"])
                    pipe.set(self.keys.last_request(key), data, ex=self.last_ttl_seconds)
            await pipe.execute()

    async def _not_erased(self, batch: list[Entry]) -> list[Entry]:
        """`batch` without the entries of requests that started before their user's erase or
        their conversation's delete (one round trip for the tombstones)."""
        named = [e for e in batch if e["user"]]
        if not named:
            return batch
        reads: list[tuple[int, str]] = []  # (index in `named`, a tombstone's key)
        for i, entry in enumerate(named):
            reads.append((i, self.keys.erased(entry["tenant"], entry["user"])))
            if entry["conversation"]:
                key = ConversationKey(entry["tenant"], entry["user"], entry["conversation"])
                reads.append((i, self.keys.conversation(key).deleted))
        async with self.redis.pipeline(transaction=False) as pipe:
            for _, name in reads:
                pipe.get(name)
            stones = await pipe.execute()
        latest: dict[int, int] = {}
        for (i, _), stone in zip(reads, stones):
            if stone is not None:
                latest[i] = max(latest.get(i, 0), int(stone))
        gone = {id(named[i]) for i, ms in latest.items() if _started_ms(named[i]) <= ms}
        if gone:
            self.dropped += len(gone)
            logger.info("request history: %d entries of erased users or deleted conversations "
                        "not written", len(gone))
        return [e for e in batch if id(e) not in gone]

    async def drain(self, timeout: float) -> None:
        """Stop the flusher and write what is still queued, for at most `timeout` s."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        try:
            await asyncio.wait_for(self.flush(), timeout)
        except TimeoutError:
            logger.warning("request history: %d entries not written at shutdown",
                           len(self._held))


def _started_ms(entry: Entry) -> float:
    """When the entry's request started (ms): its end less its total time."""
    return (entry["time"] - (entry["total_ms"] or 0) / 1000) * 1000


async def recent_requests(redis: aioredis.Redis, keys: KeySpace, tenant: str,
                          count: int) -> list[Entry]:
    """The tenant's last `count` requests, newest first."""
    rows = await redis.xrevrange(keys.request_log(tenant), count=count)
    return [_decoded(fields.get("data")) for _id, fields in rows
            if _decoded(fields.get("data"))]


async def last_request(redis: aioredis.Redis, keys: KeySpace,
                       key: ConversationKey) -> Entry | None:
    return _decoded(await redis.get(keys.last_request(key))) or None


def _decoded(raw: str | None) -> Entry:
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
