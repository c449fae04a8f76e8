"""The store: conversations on the Redis protocol (embedded Valkey, or an external server).

Public surface:
- `connect(url)`: the `redis.asyncio` client every store part expects (decoded responses);
- `EmbeddedRedis`: the bundled server for `store: embedded`;
- `RedisStore`: `ports.ConversationStore` (durable enqueue, read-your-writes load);
- `Recorder`: the worker that applies enqueued turns;
- `KeySpace`: every key name.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from gateway.store.embedded import EmbeddedRedis, EmbeddedRedisError
from gateway.store.keys import KeySpace
from gateway.store.recorder import Recorder
from gateway.store.redis_store import RedisStore

__all__ = ["EmbeddedRedis", "EmbeddedRedisError", "KeySpace", "Recorder", "RedisStore",
           "connect"]


def connect(url: str, **options: Any) -> aioredis.Redis:
    """A client for `url` (`unix:///path/redis.sock`, `redis://host:6379/0`, `rediss://...`).

    Responses are decoded to str, as the store and recorder require. Do not set a
    `socket_timeout` shorter than the recorder's `block_ms`: its blocking reads would time out.
    """
    options.setdefault("decode_responses", True)
    return aioredis.from_url(url, **options)
