"""A large request's CPU-heavy steps, run on a worker thread instead of the serving loop.

One serving process answers every tenant on one event loop. Parsing a multi-megabyte body,
reconciling a conversation of thousands of messages with its transcript and rewriting it are
each tens of milliseconds of Python; run on the loop, every other request waits for them.
`OffLoop.run(step, fn, *args)` runs `fn` on a worker thread (`anyio.to_thread`), so the loop
keeps serving meanwhile. Only large requests take the hop (the caller decides: a body of at
least `min_body_bytes`, a conversation of at least `min_messages`); a small one runs its
steps inline and pays nothing.

A thread holds the GIL until CPython asks it to switch, every `sys.getswitchinterval()`
(5 ms by default): each time the loop thread wakes for another request it would wait that
long. While at least one step runs off the loop, the interval is `switch_interval`, so the
loop thread gets the interpreter back within it; the previous interval is restored when the
last such step ends. (Why these values: docs/decisions.md, "Large requests off the serving
loop".)

Even so, while both want the interpreter, the step's thread and the loop thread get about half
of it each: other requests are served at about half speed for as long as a large one's steps
run. So, while other requests are in flight (`serving` counts the requests being served), a
request whose step ran off the loop then waits as long as the step took (an async sleep: the
loop serves the others meanwhile): a large request takes about half of the process while
others are served, and all of it when it is alone.

Each step run off the loop is counted: `gateway_off_loop_steps_total{step}`, and each wait
after one: `gateway_off_loop_yields_total{step}`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from typing import Callable, TypeVar

import anyio
from prometheus_client import Counter

T = TypeVar("T")

MIN_BODY_BYTES = 256 * 1024
"""A body this large or larger is parsed off the loop."""
MIN_MESSAGES = 1000
"""A conversation of this many messages or more (the request's and the stored ones together)
is reconciled and rewritten off the loop."""
SWITCH_INTERVAL = 0.0005
"""Seconds: the interpreter's switch interval while a step runs off the loop."""


class OffLoop:
    """Runs steps on a worker thread and counts them; one per serving process."""

    def __init__(self, counter: Counter | None = None, *, yields: Counter | None = None,
                 min_body_bytes: int = MIN_BODY_BYTES,
                 min_messages: int = MIN_MESSAGES,
                 switch_interval: float = SWITCH_INTERVAL,
                 wait: Callable[[float], Awaitable[None]] = anyio.sleep) -> None:
        """`wait`: how a request waits after its step while others are in flight (tests
        record it)."""
        self.min_body_bytes = min_body_bytes
        self.min_messages = min_messages
        self.switch_interval = switch_interval
        self._counter = counter
        self._yields = yields
        self._wait = wait
        self._running = 0
        self._saved_interval = 0.0
        self._requests = 0

    def large_body(self, size: int) -> bool:
        return size >= self.min_body_bytes

    def large_conversation(self, messages: int) -> bool:
        return messages >= self.min_messages

    @property
    def requests(self) -> int:
        """The requests in flight (inside `serving`)."""
        return self._requests

    @contextmanager
    def serving(self) -> Iterator[None]:
        """Counts a request as in flight while inside (entered on the loop thread only)."""
        self._requests += 1
        try:
            yield
        finally:
            self._requests -= 1

    async def run(self, step: str, fn: Callable[..., T], *args: object) -> T:
        """`fn(*args)` on a worker thread, counted under `step`; its exception is raised here.
        A request cancelled meanwhile is cancelled once the step has ended. While requests
        other than this one are in flight, besides those whose steps run off the loop, it then
        waits as long as the step took (see the module docstring)."""
        if self._counter is not None:
            self._counter.labels(step=step).inc()
        # Only the loop thread runs this: the counts need no lock.
        if self._running == 0:
            self._saved_interval = sys.getswitchinterval()
            sys.setswitchinterval(min(self.switch_interval, self._saved_interval))
        self._running += 1
        started = time.perf_counter()
        try:
            result = await anyio.to_thread.run_sync(fn, *args)
        finally:
            self._running -= 1
            if self._running == 0:
                sys.setswitchinterval(self._saved_interval)
        if self._requests > self._running + 1:
            if self._yields is not None:
                self._yields.labels(step=step).inc()
            await self._wait(time.perf_counter() - started)
        return result
