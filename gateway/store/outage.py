"""Logging a store outage once, not once per poll.

Background loops (the recorder's workers, the memory worker) poll the store several times a
second; while it is down each poll fails the same way. The first failure of an outage is
logged, then a reminder every `every` seconds, then the recovery. Any other error is a bug and
is logged in full every time.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

UNREACHABLE = (RedisConnectionError, RedisTimeoutError, OSError)


class OutageLog:
    def __init__(self, logger: logging.Logger, what: str, *, every: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):
        self._logger = logger
        self._what = what
        self._every = every
        self._clock = clock
        self._since: float | None = None
        self._reminded = 0.0

    def failed(self, exc: BaseException) -> None:
        if not isinstance(exc, UNREACHABLE):
            self._logger.error("%s failed; retrying", self._what, exc_info=exc)
            return
        now = self._clock()
        if self._since is None:
            self._since, self._reminded = now, now
            self._logger.warning("%s: store unreachable (%r); retrying quietly", self._what, exc)
        elif now - self._reminded >= self._every:
            self._reminded = now
            self._logger.warning("%s: store still unreachable after %.0f s (%r)", self._what,
                                 now - self._since, exc)

    def succeeded(self) -> None:
        if self._since is not None:
            self._logger.warning("%s: store reachable again after %.1f s", self._what,
                                 self._clock() - self._since)
            self._since = None
