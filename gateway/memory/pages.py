"""A conversation's stored messages read a page at a time: what the memory API reads for a user
of any size without a store call near the store's timeout (a message may hold a million
characters; docs/decisions.md, "Exports and the memory API read a page at a time").

Reads the lists as stored (the recorder's applied messages: archive, then transcript, then the
archived branches); turns received and not yet applied are in the pending hash, read by whoever
needs them (gateway/memory/export.py).
"""

from __future__ import annotations

from typing import AsyncIterator

import redis.asyncio as aioredis

from gateway.core.ids import ConversationKey
from gateway.core.messages import StoredMessage
from gateway.store.codec import ArchivedBranch, decode_branch, decode_stored
from gateway.store.redis_store import RedisStore

PAGE = 16
"""List elements per store call: at 1 M characters a message, at most 16 M characters a
call."""


class MessagePages:
    def __init__(self, redis: aioredis.Redis, store: RedisStore):
        self.redis = redis
        self.store = store

    async def every(self, key: ConversationKey) -> AsyncIterator[list[StoredMessage]]:
        """The active branch, then each archived branch's messages (where a source may be)."""
        async for page in self.active(key):
            yield page
        async for branch in self.branches(key):
            for start in range(0, len(branch.messages), PAGE):
                yield list(branch.messages[start:start + PAGE])

    async def active(self, key: ConversationKey) -> AsyncIterator[list[StoredMessage]]:
        """The archive, then the transcript. The recorder may move the transcript's oldest
        messages to the archive meanwhile: where the transcript does not follow what was read,
        the archive is read on from where it stopped (a message is never missed; one moved
        between two reads may come twice — callers key by id)."""
        ck = self.store.keys.conversation(key)
        archived, last = 0, None
        while True:
            async for page in self._pages(key, ck.archive, archived):
                archived += len(page)
                last = page[-1].id
                yield page
            skip = None
            async for page in self._pages(key, ck.transcript, 0):
                if skip is None:  # where the transcript follows what was read
                    skip = 0 if last is None else next(
                        (i for i, m in enumerate(page) if m.parent_id == last), None)
                    if skip is None and await self.redis.llen(ck.archive) > archived:
                        break  # messages moved to the archive meanwhile: read them first
                    page = page[skip or 0:]
                if page:
                    yield page
            else:
                return

    async def branches(self, key: ConversationKey) -> AsyncIterator[ArchivedBranch]:
        """Archived branches, oldest first, one per call (a branch is one stored element)."""
        name = self.store.keys.conversation(key).branches
        for index in range(int(await self.redis.llen(name))):
            raw = await self.redis.lrange(name, index, index)
            if not raw:
                return
            yield decode_branch(self.store.encryption.open(key.tenant, raw[0]))

    async def _pages(self, key: ConversationKey, list_key: str,
                     start: int) -> AsyncIterator[list[StoredMessage]]:
        while True:
            raw = await self.redis.lrange(list_key, start, start + PAGE - 1)
            if not raw:
                return
            yield [decode_stored(self.store.encryption.open(key.tenant, text)) for text in raw]
            if len(raw) < PAGE:
                return
            start += len(raw)
