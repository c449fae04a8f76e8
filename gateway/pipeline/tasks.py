"""Background work the request path starts must be tracked and drained, never forgotten."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Coroutine

logger = logging.getLogger("gateway.tasks")


class TaskTracker:
    """Holds every task it starts until it finishes; `drain` waits for them at shutdown."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    async def shielded(self, coro: Coroutine[Any, Any, Any], name: str) -> Any:
        """Run `coro` to completion even if the caller is cancelled (a client hung up): the
        caller stops waiting, the work goes on, tracked."""
        return await asyncio.shield(self.spawn(coro, name))

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("background task %s failed", task.get_name(),
                         exc_info=task.exception())

    async def drain(self, timeout: float) -> int:
        """Wait up to `timeout` s for tracked tasks; returns how many were still running."""
        if not self._tasks:
            return 0
        _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
        for task in pending:
            logger.warning("task %s still running at shutdown; cancelling", task.get_name())
            task.cancel()
        return len(pending)
