"""Deleted text leaves the store's disk: after every delete, each primary's append-only file is
rewritten by a rewrite that *started after* the delete.

Why "started after": a rewrite (BGREWRITEAOF) forks and writes the data set as it was at the
fork into the new base file; deletes made while it runs only reach the new incremental file,
so the deleted text stays in the base until the next rewrite. A request made while a rewrite
runs is refused ("already in progress") and is *not* merged into a later one. So each request
here registers a need per primary — the count of rewrites started there so far (INFO's
`aof_rewrites`, counted at the fork) — and a driver starts rewrites until one counted after it
has completed, waiting for a running one first. Needs registered while the driver works are
served together by the next rewrite that starts after all of them (coalesced, never lost).

Reliability across a process's end: a marker key (no content: a time) is written before the
need is registered and deleted once every need is met; a process that starts and finds it
(`resume`) rewrites again. A store restart (a new `run_id`) voids the counts: a rewrite on the
new server is needed. Servers without `aof_rewrites` (Redis < 7) count the rewrites this
driver itself started.

States, as the API answers and the log shows them: "rewritten" (every primary's files were
rewritten after the delete), "pending" (the driver is still at it; it goes on in the
background and logs `disk_rewrite` `rewritten` when done), "not_needed" (no append-only file
anywhere) or "failed: <reason>" (the store refuses rewrites, e.g. a managed Redis).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError, ResponseError

from gateway.store.cluster import primary_targets

log = logging.getLogger("gateway.store.disk")

REWRITTEN, PENDING, NOT_NEEDED = "rewritten", "pending", "not_needed"
MAX_FAILED_REWRITES = 3
"""Rewrites that end in error (e.g. the disk is full) before a need is given up as failed."""
RETRY_SECONDS = 1.0
"""Pause after the store did not answer, before asking again (the need is kept)."""


@dataclass
class _Node:
    """What one primary must do for the current round."""

    target: dict[str, Any]
    run_id: str = ""
    after: int = 0
    """Rewrites started on it before the round: the one that settles it is counted later."""
    started_by_us: bool = False
    failures: int = 0


class DiskRewrites:
    """One per process over one store client. `after_delete` is called after each delete."""

    @classmethod
    async def once(cls, client: Any, marker_key: str, wait_seconds: float) -> str:
        """For a caller without a long-lived instance (a CLI command, a test): one request,
        waited for up to `wait_seconds`; if still "pending" then, the marker stays set and the
        next process to start resumes it."""
        disk = cls(client, marker_key)
        try:
            return await disk.after_delete(wait_seconds)
        finally:
            await disk.aclose()

    def __init__(self, client: Any, marker_key: str, *, poll_seconds: float = 0.05):
        self.client = client
        self.marker_key = marker_key
        self.poll_seconds = poll_seconds
        self._wanted = 0
        """Generations requested: each delete's request is one."""
        self._served = 0
        self._outcome: dict[int, str] = {}
        self._changed = asyncio.Condition()
        self._driver: asyncio.Task[None] | None = None
        self._token = uuid.uuid4().hex
        """Marks this process's marker values: it clears only its own."""

    @property
    def pending(self) -> bool:
        return self._served < self._wanted

    async def after_delete(self, wait_seconds: float) -> str:
        """Make sure the store's files are rewritten after a delete just made; the state after
        at most `wait_seconds` (the rewrite goes on in the background if it is "pending").
        Never raises for the store: a marker it could not write leaves the need in memory."""
        return await self._request(wait_seconds, mark=True)

    async def resume(self) -> None:
        """At start: a marker left by a process that ended before its rewrite completed means
        one is still owed."""
        try:
            owed = bool(await self.client.exists(self.marker_key))
        except RedisError as exc:
            log.warning("disk rewrite: marker not read at start (%r)", exc)
            return
        if owed:
            log.info(json.dumps({"event": "disk_rewrite", "state": PENDING,
                                 "reason": "owed by an earlier process"}))
            await self._request(0, mark=False)

    async def _request(self, wait_seconds: float, *, mark: bool) -> str:
        self._wanted += 1
        generation = self._wanted
        if mark:
            try:
                await self.client.set(self.marker_key, f"{self._token}:{generation}")
            except RedisError as exc:  # the rewrite is still driven by this process
                log.warning("disk rewrite: marker not written (%r)", exc)
        if self._driver is None or self._driver.done():
            self._driver = asyncio.create_task(self._drive(), name="disk-rewrites")
        async with self._changed:
            try:
                async with asyncio.timeout(wait_seconds):
                    await self._changed.wait_for(lambda: self._served >= generation)
            except TimeoutError:
                return PENDING
            return self._result(generation)

    def _result(self, generation: int) -> str:
        # The first round that served it decided: the smallest outcome key >= generation.
        decided = [g for g in self._outcome if g >= generation]
        return self._outcome[min(decided)] if decided else PENDING

    async def aclose(self) -> None:
        """Stop driving (at shutdown). A rewrite still owed stays owed: the marker remains and
        the next process to start resumes it."""
        if self._driver is not None and not self._driver.done():
            self._driver.cancel()
            try:
                await self._driver
            except asyncio.CancelledError:
                pass

    async def _drive(self) -> None:
        while self._served < self._wanted:
            generation = self._wanted
            started = time.monotonic()
            log.info(json.dumps({"event": "disk_rewrite", "state": PENDING,
                                 "deletes": generation - self._served}))
            try:
                outcome = await self._round()
            except Exception as exc:  # noqa: BLE001 — a bug must not strand the waiters
                log.exception("disk rewrite failed")
                outcome = f"failed: {exc!r}"
            async with self._changed:
                self._outcome[generation] = outcome
                # Outcomes older than the waiters that can still ask are not needed.
                for old in [g for g in self._outcome if g < self._served]:
                    del self._outcome[old]
                self._served = generation
                self._changed.notify_all()
            log.info(json.dumps({"event": "disk_rewrite", "state": outcome,
                                 "seconds": round(time.monotonic() - started, 3)}))
            if self._served == self._wanted:
                await self._clear_marker(generation)

    async def _round(self) -> str:
        """Every primary's files rewritten by a rewrite started after this round began."""
        while True:
            try:
                nodes = [_Node(target) for target in await primary_targets(self.client)]
                results = await asyncio.gather(*(self._rewrite(node) for node in nodes))
            except (RedisError, OSError) as exc:  # the store is away: the need is kept
                log.warning("disk rewrite: store unavailable (%r); trying again", exc)
                await asyncio.sleep(RETRY_SECONDS)
                continue
            failed = [r for r in results if r.startswith("failed")]
            if failed:
                return failed[0]
            return REWRITTEN if REWRITTEN in results else NOT_NEEDED

    async def _info(self, node: _Node) -> dict[str, Any]:
        persistence = await self.client.execute_command("INFO", "persistence", **node.target)
        server = await self.client.execute_command("INFO", "server", **node.target)
        return {**persistence, "run_id": server.get("run_id", "")}

    async def _rewrite(self, node: _Node) -> str:
        info = await self._info(node)
        if not int(info.get("aof_enabled", 0)):
            return NOT_NEEDED
        node.run_id, node.after = info["run_id"], int(info.get("aof_rewrites", 0))
        while True:
            busy = int(info.get("aof_rewrite_in_progress", 0)) or \
                int(info.get("aof_rewrite_scheduled", 0))
            if info["run_id"] != node.run_id:  # restarted: its files came from before
                node.run_id, node.after = info["run_id"], int(info.get("aof_rewrites", 0))
                node.started_by_us = False
            later = int(info.get("aof_rewrites", 0)) > node.after if "aof_rewrites" in info \
                else node.started_by_us
            if later and not busy:
                if info.get("aof_last_bgrewrite_status", "ok") == "ok":
                    return REWRITTEN
                node.failures += 1
                if node.failures >= MAX_FAILED_REWRITES:
                    return "failed: the store's rewrites end in error " \
                           "(aof_last_bgrewrite_status)"
                node.after, node.started_by_us = int(info.get("aof_rewrites", 0)), False
            if not busy:
                try:
                    await self.client.execute_command("BGREWRITEAOF", **node.target)
                    node.started_by_us = True
                except ResponseError as exc:
                    if "in progress" not in str(exc):  # refused for good (managed Redis)
                        return f"failed: {exc}"
            await asyncio.sleep(self.poll_seconds)
            info = await self._info(node)

    async def _clear_marker(self, generation: int) -> None:
        # Only if it still holds this round's value: a later delete (of this process or
        # another) set it again, and its rewrite is still owed.
        try:
            await self.client.eval(_CLEAR_LUA, 1, self.marker_key, f"{self._token}:{generation}")
        except RedisError as exc:  # left set: one extra rewrite at the next start
            log.warning("disk rewrite: marker not cleared (%r)", exc)


_CLEAR_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
