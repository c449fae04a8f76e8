"""What a user may see of what the gateway keeps of them, and the few edits that forget
nothing (the user-control API's reads; gateway/http/memory_api.py is its HTTP face): settings,
profile, conversations, facts and summary chunks with their sources, pins, topics. Deleting and
erasing is gateway/memory/erasure.py; the export is gateway/memory/export.py; the JSON shapes
are gateway/memory/rendering.py.

Invariants:
- everything is scoped to one (tenant, user): keys come from `KeySpace` / `MemoryKeySpace`
  built from both — another user's or tenant's data is never read;
- reads do not depend on the memory runtime: data stored while memory was enabled stays
  visible, exportable and erasable after a tenant switches memory off.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Sequence

import numpy as np
import redis.asyncio as aioredis

from gateway.core.ids import ConversationKey
from gateway.core.context.blocks import PinnedMessage
from gateway.core.messages import StoredMessage
from gateway.memory.pages import MessagePages
from gateway.memory.records.chunk_store import ChunkStore
from gateway.memory.records.facts_store import FactStore
from gateway.memory.records.keys import MemoryKeySpace
from gateway.memory.records.pin_store import PinStore, pin_json
from gateway.memory.records.profile_store import ProfileStore
from gateway.memory.records.settings_store import SettingsStore, UserSettings
from gateway.memory.records.topic_store import TopicStore, topic_json
from gateway.memory.jobs.user_index import UserRecallIndex
from gateway.memory.rendering import (chunk_json, conversation_json, fact_json, message_json,
                                      source_json)
from gateway.store.keys import ConversationKeys
from gateway.store.redis_store import RedisStore

Json = dict[str, Any]
_PAGE = 500


async def _no_embedding(texts: Sequence[str]) -> np.ndarray:
    raise RuntimeError("the control API never embeds (it only reads and deletes facts)")


class MemoryControl:
    """The user-control reads over the store, and the stores they go through (which
    `MemoryErasure` and the export use too)."""

    def __init__(self, redis: aioredis.Redis, store: RedisStore,
                 keys: MemoryKeySpace | None = None, *,
                 clock: Callable[[], float] = time.time):
        self.redis = redis
        self.store = store
        self.keys = keys or MemoryKeySpace(store.keys)
        sealed = {"encryption": store.encryption}  # the store's keys open the memory too
        self.settings = SettingsStore(redis, self.keys)
        self.facts = FactStore(redis, self.keys, _no_embedding, **sealed)
        self.profiles = ProfileStore(redis, self.keys, **sealed)
        self.chunks = ChunkStore(redis, self.keys, **sealed)
        self.user_index = UserRecallIndex(redis, self.keys, **sealed)
        self.pin_store = PinStore(redis, self.keys, **sealed)
        self.topic_store = TopicStore(redis, self.keys, **sealed)
        self.pages = MessagePages(redis, store)
        self.clock = clock

    # -- settings and profile ----------------------------------------------------------------

    async def get_settings(self, tenant: str, user: str) -> UserSettings:
        return await self.settings.get(tenant, user)

    async def set_settings(self, tenant: str, user: str, *, memory: bool | None,
                           auto_extract: bool | None) -> UserSettings:
        return await self.settings.set(tenant, user, memory=memory, auto_extract=auto_extract)

    async def profile(self, tenant: str, user: str) -> Json:
        return (await self.profiles.get(tenant, user)).to_dict()

    # -- conversations -----------------------------------------------------------------------

    async def conversation_ids(self, tenant: str, user: str) -> list[str]:
        """The user's conversations: those with a meta hash (at least one turn applied)."""
        prefix = self.keys.store.conversations_of(tenant, user).removesuffix("*")
        found = set()
        async for name in self.redis.scan_iter(match=prefix + "*:meta", count=_PAGE):
            conversation = _conversation_of(name.removeprefix(prefix))
            if conversation is not None and name == self._ck(tenant, user, conversation).meta:
                found.add(conversation)
        return sorted(found)

    async def conversations(self, tenant: str, user: str, *, limit: int = 100,
                            after: str | None = None) -> tuple[list[Json], bool]:
        """A page of the user's conversations by id: at most `limit`, those after the id
        `after` (a cursor: the last id of the page before); and whether more follow. Only the
        page's conversations are read beyond their ids."""
        ids = [c for c in await self.conversation_ids(tenant, user)
               if after is None or c > after]
        page = ids[:limit]
        metas = await asyncio.gather(*(self.store.meta(ConversationKey(tenant, user, c))
                                       for c in page))
        return [conversation_json(c, meta) for c, meta in zip(page, metas)], len(ids) > limit

    async def exists(self, key: ConversationKey) -> bool:
        ck = self.keys.store.conversation(key)
        return bool(await self.redis.exists(ck.meta, ck.transcript, ck.pending))

    async def conversation(self, key: ConversationKey) -> Json | None:
        """Its active branch (pending turns included; its archived oldest messages first: the
        whole history) and archived branches; None if absent."""
        if not await self.exists(key):
            return None
        meta, messages, branches = await asyncio.gather(
            self.store.meta(key), self.store.history(key), self.store.branches(key))
        return {**conversation_json(key.conversation, meta),
                "messages": [message_json(m) for m in messages],
                "branches": [{"archived_at": b.archived_at,
                              "messages": [message_json(m) for m in b.messages]}
                             for b in branches]}

    async def message_ids(self, key: ConversationKey) -> frozenset[str]:
        """Ids of the conversation's messages, every branch (read a page at a time)."""
        return frozenset([m.id async for page in self.pages.every(key) for m in page])

    # -- facts and chunks, with their sources ------------------------------------------------

    async def facts_with_sources(self, tenant: str, user: str) -> list[Json]:
        facts = await self.facts.list(tenant, user)
        if not facts:
            return []
        wanted = {i for fact in facts for i in fact.source_ids}
        sources: dict[str, Json] = {}
        for conversation in await self.conversation_ids(tenant, user):
            sources.update(await self._sources(ConversationKey(tenant, user, conversation),
                                               wanted - sources.keys()))
        return [fact_json(f, sources) for f in facts]

    async def chunks_with_sources(self, key: ConversationKey) -> list[Json] | None:
        """Summary chunks oldest first (deleted ones as blank tombstones); None if the
        conversation does not exist."""
        if not await self.exists(key):
            return None
        chunks = await self.chunks.list(key)
        messages = await self._sources(key, {i for c in chunks for i in c.source_ids})
        return [chunk_json(c, messages) for c in chunks]

    # -- pinned messages ---------------------------------------------------------------------

    async def pins(self, key: ConversationKey) -> list[Json] | None:
        """The conversation's pins, oldest first; None if the conversation does not exist."""
        if not await self.exists(key):
            return None
        return [pin_json(p) for p in await self.pin_store.list(key)]

    async def pin(self, key: ConversationKey, message_id: str) -> Json | None:
        """Pin a stored message (active or archived branch) by id; None if there is none.
        Raises PinLimitReached when the conversation holds the most pins it may."""
        found = await self._find(key, message_id)
        if found is None:
            return None
        pin = PinnedMessage(found.id, found.message, "api", self.clock())
        return pin_json((await self.pin_store.pin(key, (pin,)))[0])

    async def unpin(self, key: ConversationKey, message_id: str) -> bool:
        return await self.pin_store.unpin(key, message_id)

    async def topics(self, key: ConversationKey) -> Json | None:
        """The current topic and every topic kept, oldest first; None without the
        conversation."""
        if not await self.exists(key):
            return None
        state = await self.topic_store.load(key)
        return {"object": "memory.topics", "current": topic_json(state.current)
                if state.current else None, "data": [topic_json(s) for s in state.segments]}

    # -- helpers -----------------------------------------------------------------------------

    def _ck(self, tenant: str, user: str, conversation: str) -> ConversationKeys:
        return self.keys.store.conversation(ConversationKey(tenant, user, conversation))

    async def _sources(self, key: ConversationKey, wanted: set[str]) -> dict[str, Json]:
        """The messages of the conversation with an id in `wanted`, as sources."""
        found: dict[str, Json] = {}
        if wanted:
            async for page in self.pages.every(key):
                found.update((m.id, source_json(key.conversation, m)) for m in page
                             if m.id in wanted)
        return found

    async def _find(self, key: ConversationKey, message_id: str) -> StoredMessage | None:
        async for page in self.pages.every(key):
            for m in page:
                if m.id == message_id:
                    return m
        return None


def _conversation_of(rest: str) -> str | None:
    """The conversation id at the start of `rest` ("<length>:<id>:..."), or None."""
    length, sep, tail = rest.partition(":")
    if not sep or not length.isdigit() or len(tail) < int(length):
        return None
    return tail[:int(length)]
