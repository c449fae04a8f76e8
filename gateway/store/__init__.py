"""The store: conversations on the Redis protocol (embedded Valkey, or an external server).

Public surface:
- `connect(url)`: the `redis.asyncio` client every store part expects (decoded responses);
- `EmbeddedRedis`: the bundled server for `store: embedded`;
- `RedisStore`: `ports.ConversationStore` (durable enqueue, read-your-writes load);
- `KeySpace`: every key name.

The recorder, which applies enqueued turns, is in `gateway.store.recording` (above this package).
Imported by everything that touches the store; it imports only config, ops and core.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from gateway.store.cluster import connect_cluster
from gateway.store.embedded import EmbeddedRedis, EmbeddedRedisError
from gateway.store.keys import KeySpace
from gateway.store.pool import PoolStats, StorePool
from gateway.store.redis_store import RedisStore

__all__ = ["EmbeddedRedis", "EmbeddedRedisError", "KeySpace", "PoolStats", "RedisStore",
           "StorePool", "connect"]

DEFAULT_POOL_SIZE = 100


def connect(url: str, *, max_connections: int = DEFAULT_POOL_SIZE,
            pool_timeout: float | None = None, cluster: bool = False,
            **options: Any) -> aioredis.Redis:
    """A client for `url` (`unix:///path/redis.sock`, `redis://host:6379/0`, `rediss://...`).

    Responses are decoded to str, as the store and recorder require. Do not set a
    `socket_timeout` shorter than the recorder's `block_ms`: its blocking reads would time out.

    The client has a `StorePool` of at most `max_connections`: a call that finds them all in
    use waits up to `pool_timeout` seconds (default: the `socket_timeout`, else 20 s) for one
    to be released, then fails with a `redis.ConnectionError`.

    `cluster`: `url` is a node of a Redis Cluster; the client is a `RedisCluster` (same
    command surface) with at most `max_connections` commands in flight, waiting the same way
    (gateway/store/cluster.py).
    """
    if pool_timeout is None:
        pool_timeout = options.get("socket_timeout") or 20.0
    if cluster:
        return connect_cluster(url, max_connections=max_connections,  # type: ignore[return-value]
                               pool_timeout=pool_timeout, **options)
    options.setdefault("decode_responses", True)
    pool = StorePool.from_url(url, max_connections=max_connections, timeout=pool_timeout,
                              **options)
    return aioredis.Redis.from_pool(pool)
