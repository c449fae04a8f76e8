"""A conversation's memory brief in Redis: one string per conversation (sealed JSON).

The brief (gateway/core/context/brief.py) is made at a conversation's first request and read
by every later one. It is made again when it is gone — the user deleted a fact, the profile,
a summary chunk or a conversation (gateway/memory/erasure.py forgets every brief of the
user: `forget_all`) — or when the tenant's `memory.brief_tokens` changed. Its key extends the
conversation's key base (`ConversationMemoryKeys.brief`), so deleting or erasing the
conversation removes it, and in a cluster it lives on the conversation's slot.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import WatchError

from gateway.core.context.brief import Brief
from gateway.core.ids import ConversationKey
from gateway.memory.records.keys import MemoryKeySpace
from gateway.store.encryption.crypto import NO_ENCRYPTION, Encryption
from gateway.store.redis_store import erased_before

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StoredBrief:
    brief: Brief
    budget: int
    """The `memory.brief_tokens` it was made within."""
    made_at: float


class BriefStore:
    def __init__(self, redis: aioredis.Redis, keys: MemoryKeySpace, *,
                 encryption: Encryption = NO_ENCRYPTION) -> None:
        self.redis = redis
        self.keys = keys
        self.encryption = encryption

    async def get(self, key: ConversationKey) -> StoredBrief | None:
        return self.parse(key, await self.redis.get(self.keys.conversation(key).brief))

    def parse(self, key: ConversationKey, raw: Any) -> StoredBrief | None:
        if raw is None:
            return None
        try:
            data = json.loads(self.encryption.open(key.tenant, _text(raw) or ""))
            brief = Brief(text=data["text"], item_ids=tuple(data["item_ids"]),
                          lines=tuple(data["lines"]), profile=bool(data["profile"]),
                          tokens=int(data["tokens"]))
            return StoredBrief(brief, int(data["budget"]), float(data["made_at"]))
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("stored brief of %s is unreadable (%s); made again", key, exc)
            return None

    async def put(self, key: ConversationKey, stored: StoredBrief, *, read_at: float) -> bool:
        """Store the brief unless the user was erased or the conversation deleted at or after
        `read_at` (seconds: when the memory it was made from was read) — checked in the same
        transaction as the write (WATCH on both tombstones, which share the conversation's
        slot). False: refused, nothing written."""
        b = stored.brief
        data = {"text": b.text, "item_ids": list(b.item_ids), "lines": list(b.lines),
                "profile": b.profile, "tokens": b.tokens, "budget": stored.budget,
                "made_at": stored.made_at}
        sealed = self.encryption.seal(key.tenant, json.dumps(data, ensure_ascii=False))
        tombstones = (self.keys.store.erased(key.tenant, key.user),
                      self.keys.store.conversation(key).deleted)
        async with self.redis.pipeline(transaction=True) as pipe:
            try:
                await pipe.watch(*tombstones)
                # One GET each: a cluster's pipeline refuses MGET.
                values = [await pipe.get(t) for t in tombstones]
                if any(erased_before(value, read_at) for value in values):
                    return False
                pipe.multi()
                pipe.set(self.keys.conversation(key).brief, sealed)
                await pipe.execute()
            except WatchError:  # an erase or delete landed meanwhile
                return False
        return True

    async def forget(self, keys: list[ConversationKey]) -> None:
        """Delete the briefs of `keys` (each is made again at its conversation's next
        request)."""
        if keys:
            await self.redis.delete(*(self.keys.conversation(k).brief for k in keys))


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def brief_json(stored: StoredBrief | None) -> dict[str, Any] | None:
    """The brief as the user control API and the export show it (None: none made yet):
    `content`, what the model is told (null for an empty brief), its `tokens`, the recalled
    `item_ids` it shows, whether it shows the `profile`, the `budget` it was made within and
    when it was made (`made_at`, epoch seconds)."""
    if stored is None:
        return None
    b = stored.brief
    return {"content": b.text or None, "tokens": b.tokens, "item_ids": list(b.item_ids),
            "profile": b.profile, "budget": stored.budget, "made_at": stored.made_at}
