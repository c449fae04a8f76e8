"""A user's memory switches: remember at all, and extract facts automatically."""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as aioredis

from gateway.memory.records.keys import MemoryKeySpace

_TRUE, _FALSE = "on", "off"


@dataclass(frozen=True, slots=True)
class UserSettings:
    memory: bool = True
    """Off: nothing of this user's conversations goes into memory layers, nothing is recalled.
    (The transcript itself is still the user's history; `X-Gateway-Persist: false` skips it.)"""
    auto_extract: bool = True
    """Off: no long-term facts or profile are derived from this user's messages."""


class SettingsStore:
    def __init__(self, redis: aioredis.Redis, keys: MemoryKeySpace | None = None):
        self._redis = redis
        self._keys = keys or MemoryKeySpace()

    async def get(self, tenant: str, user: str) -> UserSettings:
        return self.parse(await self._redis.hgetall(self.key(tenant, user)))

    def key(self, tenant: str, user: str) -> str:
        """The hash `parse` reads (for callers batching their reads)."""
        return self._keys.user(tenant, user).settings

    @staticmethod
    def parse(raw: dict[str, str]) -> UserSettings:
        return UserSettings(memory=raw.get("memory", _TRUE) != _FALSE,
                            auto_extract=raw.get("auto_extract", _TRUE) != _FALSE)

    async def set(self, tenant: str, user: str, *, memory: bool | None = None,
                  auto_extract: bool | None = None) -> UserSettings:
        changes = {name: (_TRUE if value else _FALSE)
                   for name, value in (("memory", memory), ("auto_extract", auto_extract))
                   if value is not None}
        if changes:
            await self._redis.hset(self._keys.user(tenant, user).settings, mapping=changes)
        return await self.get(tenant, user)
