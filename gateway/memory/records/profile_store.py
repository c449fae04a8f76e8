"""A user's profile in Redis: one hash, field -> JSON value (see `Profile.to_dict`)."""

from __future__ import annotations

import json
import logging
from typing import Sequence

import redis.asyncio as aioredis

from gateway.core.messages import Message, StoredMessage
from gateway.core.memory.profile import Profile, update_profile
from gateway.memory.records.keys import MemoryKeySpace
from gateway.memory.records.writes import Direct, Writes
from gateway.store.encryption.crypto import NO_ENCRYPTION, Encryption

log = logging.getLogger(__name__)


class ProfileStore:
    def __init__(self, redis: aioredis.Redis, keys: MemoryKeySpace, *,
                 encryption: Encryption = NO_ENCRYPTION) -> None:
        """`encryption` seals each field's value (the field names are fixed words)."""
        self.redis = redis
        self.keys = keys
        self.encryption = encryption

    async def get(self, tenant: str, user: str) -> Profile:
        """The stored profile; an empty one when there is none or it is unreadable."""
        return self.parse(tenant, user, await self.redis.hgetall(self.key(tenant, user)))

    def key(self, tenant: str, user: str) -> str:
        """The hash `parse` reads (for callers batching their reads)."""
        return self.keys.user(tenant, user).profile

    def parse(self, tenant: str, user: str, raw: dict[str, str]) -> Profile:
        try:
            return Profile.from_dict({field: json.loads(self.encryption.open(tenant, value))
                                      for field, value in raw.items()})
        except (ValueError, TypeError) as exc:
            log.warning("stored profile of %s/%s is unreadable (%s); ignored", tenant, user, exc)
            return Profile()

    async def put(self, tenant: str, user: str, profile: Profile, *,
                  writes: Writes | None = None) -> None:
        """Replace the stored profile (an empty profile deletes it), in a transaction of
        `writes` (the memory job's fence; default: direct)."""
        key = self.keys.user(tenant, user).profile
        fields = {name: self.encryption.seal(tenant, json.dumps(value, ensure_ascii=False))
                  for name, value in profile.to_dict().items() if value}
        async with (writes or Direct(self.redis)).transaction() as pipe:
            pipe.delete(key)
            if fields:
                pipe.hset(key, mapping=fields)
            await pipe.execute()

    async def update(self, tenant: str, user: str,
                     messages: Sequence[Message | StoredMessage]) -> Profile:
        """Learn from `messages` (core.profile.update_profile); writes only on a change."""
        before = await self.get(tenant, user)
        after = update_profile(before, messages)
        if after != before:
            await self.put(tenant, user, after)
        return after

    async def delete(self, tenant: str, user: str) -> None:
        await self.redis.delete(self.keys.user(tenant, user).profile)
