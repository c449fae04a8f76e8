"""A conversation's topic state in Redis (gateway/core/memory/topics.py says what a segment is).

Layout (gateway/memory/records/keys.py, `topics`): one hash with three fields, each sealed JSON —
`current`: the current segment (what the request path reads, pipelined with its other memory
reads: one small field, no extra round trip); `history`: every segment kept, oldest first;
`through`: "<count>:<last id>", the transcript prefix the tracker has walked. The memory worker writes all
three in one transaction while it holds the conversation's lock. The key sits under the
conversation's base, so deleting the conversation or erasing the user removes it.

An entry that cannot be read (a foreign write, a key that no longer opens) reads as no topic
state: the tracker then walks the conversation again from its start.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from gateway.core.ids import ConversationKey
from gateway.core.memory.topics import TopicSegment
from gateway.memory.records.keys import MemoryKeySpace
from gateway.memory.records.writes import Direct, Writes
from gateway.store.encryption.crypto import NO_ENCRYPTION, DecryptError, Encryption

log = logging.getLogger("gateway.memory.topics")

CURRENT, HISTORY, THROUGH = "current", "history", "through"


@dataclass(frozen=True, slots=True)
class TopicState:
    segments: tuple[TopicSegment, ...] = ()
    """Oldest first; the last one is the current topic. Empty: nothing walked yet."""
    through: int = 0
    """Transcript messages (from the branch's start) the tracker has walked."""
    through_id: str | None = None
    """The id of the last of them: the walk resumes only while it is still there."""

    @property
    def current(self) -> TopicSegment | None:
        return self.segments[-1] if self.segments else None


def topic_json(segment: TopicSegment) -> dict[str, Any]:
    """A segment as the memory API shows it."""
    return {"object": "memory.topic", **segment.to_json()}


class TopicStore:
    def __init__(self, redis: aioredis.Redis, keys: MemoryKeySpace | None = None, *,
                 encryption: Encryption = NO_ENCRYPTION) -> None:
        """`encryption` seals every field (labels are the user's words)."""
        self.redis = redis
        self.keys = keys or MemoryKeySpace()
        self.encryption = encryption

    def key(self, key: ConversationKey) -> str:
        return self.keys.conversation(key).topics

    async def load(self, key: ConversationKey) -> TopicState:
        history, through = await self.redis.hmget(self.key(key), [HISTORY, THROUGH])
        try:
            segments = tuple(TopicSegment.from_json(s)
                             for s in json.loads(self._open(key.tenant, history) or "[]"))
            count, _, last_id = (self._open(key.tenant, through) or "0:").partition(":")
            walked = int(count)
        except (ValueError, TypeError, DecryptError) as exc:
            log.warning("unreadable topic state of %s, walking it again: %r", key, exc)
            return TopicState()
        return TopicState(segments, walked, last_id or None)

    async def save(self, key: ConversationKey, state: TopicState, *,
                   writes: Writes | None = None) -> None:
        """Store `state` in a transaction of `writes` (the memory job's fence; default:
        direct)."""
        seal = self.encryption.seal
        tenant = key.tenant
        fields = {HISTORY: seal(tenant, _dumps([s.to_json() for s in state.segments])),
                  THROUGH: seal(tenant, f"{state.through}:{state.through_id or ''}")}
        current = state.current
        async with (writes or Direct(self.redis)).transaction() as pipe:
            if current is None:
                pipe.hdel(self.key(key), CURRENT)
            else:
                fields[CURRENT] = seal(tenant, _dumps(current.to_json()))
            pipe.hset(self.key(key), mapping=fields)
            await pipe.execute()

    def queue_current(self, pipe: Any, key: ConversationKey) -> None:
        """Queue the read `parse_current` decodes (the request path's one field)."""
        pipe.hget(self.key(key), CURRENT)

    def parse_current(self, tenant: str, raw: str | None) -> TopicSegment | None:
        """The current segment from its stored field; None when absent or unreadable (the
        request goes on without a topic: logged)."""
        if raw is None:
            return None
        try:
            return TopicSegment.from_json(json.loads(self.encryption.open(tenant, raw)))
        except (ValueError, TypeError, AttributeError) as exc:
            log.warning("unreadable current topic of tenant %s: %r", tenant, exc)
            return None

    async def current(self, key: ConversationKey) -> TopicSegment | None:
        return self.parse_current(key.tenant, await self.redis.hget(self.key(key), CURRENT))

    def _open(self, tenant: str, raw: str | None) -> str | None:
        return None if raw is None else self.encryption.open(tenant, raw)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
