"""The store's connection pool: bounded, and waiting for a free connection instead of failing.

redis-py's default async pool fails at once (`MaxConnectionsError`) when every connection is
in use, so a burst of concurrent requests beyond the pool size ran without memory as if the
store were down. `StorePool` waits for a connection up to `timeout` seconds (the request's
store timeout) and counts what happened, for `/readyz` and `/metrics`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from redis.asyncio import BlockingConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError


@dataclass(frozen=True)
class PoolStats:
    max_connections: int
    in_use: int
    idle: int
    waits: int
    """Connection requests that found every connection in use and had to wait."""
    timeouts: int
    """Waits that ended without a connection (the caller saw a store error)."""

    @property
    def saturation(self) -> float:
        return self.in_use / self.max_connections

    def as_dict(self) -> dict[str, Any]:
        return {"max_connections": self.max_connections, "in_use": self.in_use,
                "idle": self.idle, "saturation": round(self.saturation, 3),
                "waits": self.waits, "timeouts": self.timeouts}


class StorePool(BlockingConnectionPool):
    """`BlockingConnectionPool` that counts its waits and wait timeouts."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.waits = 0
        self.timeouts = 0

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        if len(self._in_use_connections) >= self.max_connections:
            self.waits += 1
        try:
            return await super().get_connection(*args, **kwargs)
        except RedisConnectionError as exc:
            if isinstance(exc.__cause__, asyncio.TimeoutError):
                self.timeouts += 1
            raise

    def stats(self) -> PoolStats:
        return PoolStats(self.max_connections, len(self._in_use_connections),
                         len(self._available_connections), self.waits, self.timeouts)
