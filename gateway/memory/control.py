"""What a user may see and do with what the gateway keeps of them (the user-control API's
logic; gateway/http/memory_api.py is its HTTP face): list, export, delete, erase.

Invariants:
- everything is scoped to one (tenant, user): keys come from `KeySpace` / `MemoryKeySpace`
  built from both, entries of shared structures (streams, dirty set, dead letters) are
  matched on both fields — another user's or tenant's data is never read or touched;
- reads do not depend on the memory runtime: data stored while memory was enabled stays
  visible, exportable and erasable after a tenant switches memory off;
- `erase` leaves nothing of the user in the store except its tombstone (named by a hash, see
  `KeySpace.erased`): turns still queued are deleted, and any turn created before the erase
  that reaches a recorder, `load` or the memory worker later is dropped (see redis_store).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import redis.asyncio as aioredis

from gateway.core.memory.compaction import SummaryChunk
from gateway.core.memory.facts import Fact
from gateway.core.ids import ConversationKey
from gateway.core.context.blocks import PinnedMessage
from gateway.core.messages import StoredMessage
from gateway.memory.records.chunk_store import ChunkStore
from gateway.memory.records.facts_store import FactStore
from gateway.memory.records.keys import MemoryKeySpace
from gateway.memory.records.pin_store import PinStore, pin_json
from gateway.memory.records.profile_store import ProfileStore
from gateway.memory.records.settings_store import SettingsStore, UserSettings
from gateway.memory.records.topic_store import TopicStore, topic_json
from gateway.memory.jobs.user_index import UserRecallIndex
from gateway.store.cluster import rewrite_append_only_files
from gateway.store.codec import CodecError, decode_key, encode_key
from gateway.store.keys import ConversationKeys
from gateway.store.redis_store import RedisStore

Json = dict[str, Any]
_PAGE = 500


async def _no_embedding(texts: Sequence[str]) -> np.ndarray:
    raise RuntimeError("the control API never embeds (it only reads and deletes facts)")


def message_json(message: StoredMessage) -> Json:
    """A stored message as the API shows it: its id and place, and the message as sent."""
    return {"id": message.id, "parent_id": message.parent_id,
            "created_at": message.created_at, "incomplete": message.incomplete,
            "message": message.message.to_openai()}


def _source_json(conversation: str, message: StoredMessage) -> Json:
    return {"conversation": conversation, "id": message.id, "role": message.message.role,
            "content": message.message.to_openai().get("content")}


@dataclass(frozen=True, slots=True)
class Erasure:
    erased_at: float
    """The store's time of the erase (seconds): turns created up to it never come back."""
    keys_deleted: int
    entries_deleted: int
    """Queued jobs, dead letters and dirty marks of the user, in shared structures."""
    complete: bool
    """False if a memory worker was still processing one of the user's conversations when
    the erase stopped waiting for it: what it writes afterwards needs another erase."""
    disk: str = "not_needed"
    """What was done about copies on the store's disk (`rewrite_disk_copies`)."""

    def to_json(self) -> Json:
        return {"object": "memory.erasure", "erased_at": self.erased_at,
                "keys_deleted": self.keys_deleted, "entries_deleted": self.entries_deleted,
                "complete": self.complete, "disk": self.disk}


class MemoryControl:
    """The user-control operations over the store. `settle_seconds` bounds how long a delete
    waits for a memory worker still processing the conversation (its lock) before sweeping
    again what that run wrote."""

    def __init__(self, redis: aioredis.Redis, store: RedisStore,
                 keys: MemoryKeySpace | None = None, *, settle_seconds: float = 10.0,
                 poll_seconds: float = 0.05, clock: Callable[[], float] = time.time):
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
        self.settle_seconds = settle_seconds
        self.poll_seconds = poll_seconds
        self.clock = clock

    # -- settings and profile ----------------------------------------------------------------

    async def get_settings(self, tenant: str, user: str) -> UserSettings:
        return await self.settings.get(tenant, user)

    async def set_settings(self, tenant: str, user: str, *, memory: bool | None,
                           auto_extract: bool | None) -> UserSettings:
        return await self.settings.set(tenant, user, memory=memory, auto_extract=auto_extract)

    async def profile(self, tenant: str, user: str) -> Json:
        return (await self.profiles.get(tenant, user)).to_dict()

    async def delete_profile(self, tenant: str, user: str) -> None:
        await self.profiles.delete(tenant, user)

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

    async def conversations(self, tenant: str, user: str) -> list[Json]:
        ids = await self.conversation_ids(tenant, user)
        metas = await asyncio.gather(*(self.store.meta(ConversationKey(tenant, user, c))
                                       for c in ids))
        return [_conversation_json(c, meta) for c, meta in zip(ids, metas)]

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
        return {**_conversation_json(key.conversation, meta),
                "messages": [message_json(m) for m in messages],
                "branches": [{"archived_at": b.archived_at,
                              "messages": [message_json(m) for m in b.messages]}
                             for b in branches]}

    async def delete_conversation(self, key: ConversationKey) -> bool:
        """Forget the conversation: transcript, branches, pending turns, meta and every memory
        key derived from it (its queued jobs become duplicates: the seq counters stay), its
        entries in the user-level recall index, and what the user's facts owe to it — a fact
        stated only in it is deleted, the others lose its messages from their sources
        (`core.facts.forget_sources`)."""
        if not await self.exists(key):
            return False
        said = frozenset(m.id for m in await self._messages_of(key))
        await self.store.delete(key)
        memory = self.keys.conversation(key)
        await self._settle([memory.lock])
        await self.redis.delete(*memory.all(), self.keys.store.last_request(key),
                                self.keys.store.responses(key))
        await self.user_index.remove_conversation(key)
        await self.redis.zrem(self.keys.store.memory_dirty_of(key), encode_key(key))
        # After the settle: a memory run of this conversation may have been adding facts.
        await self.facts.forget_sources(key.tenant, key.user, said)
        await self.rewrite_disk_copies()
        return True

    # -- facts and chunks, with their sources ------------------------------------------------

    async def facts_with_sources(self, tenant: str, user: str) -> list[Json]:
        facts = await self.facts.list(tenant, user)
        if not facts:
            return []
        sources = await self._messages_of_user(tenant, user)
        return [_fact_json(f, sources) for f in facts]

    async def delete_fact(self, tenant: str, user: str, fact_key: str) -> bool:
        if await self.facts.get(tenant, user, fact_key) is None:
            return False  # checked first: deleting a missing fact would still bump a version
        return await self.facts.delete(tenant, user, fact_key)

    async def chunks_with_sources(self, key: ConversationKey) -> list[Json] | None:
        """Summary chunks oldest first (deleted ones as blank tombstones); None if the
        conversation does not exist."""
        if not await self.exists(key):
            return None
        chunks = await self.chunks.list(key)
        messages = {m.id: _source_json(key.conversation, m)
                    for m in await self._messages_of(key)}
        return [_chunk_json(c, messages) for c in chunks]

    async def delete_chunk(self, key: ConversationKey, chunk_id: str) -> bool:
        if not await self.chunks.delete(key, chunk_id):
            return False
        await self.user_index.remove_chunk(key, chunk_id)
        return True

    # -- pinned messages ---------------------------------------------------------------------

    async def pins(self, key: ConversationKey) -> list[Json] | None:
        """The conversation's pins, oldest first; None if the conversation does not exist."""
        if not await self.exists(key):
            return None
        return [pin_json(p) for p in await self.pin_store.list(key)]

    async def pin(self, key: ConversationKey, message_id: str) -> Json | None:
        """Pin a stored message (active or archived branch) by id; None if there is none.
        Raises PinLimitReached when the conversation holds the most pins it may."""
        found = next((m for m in await self._messages_of(key) if m.id == message_id), None)
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

    # -- export and erase --------------------------------------------------------------------

    async def export(self, tenant: str, user: str) -> Json:
        """Everything the store keeps of the user, as one JSON document."""
        settings = await self.settings.get(tenant, user)
        conversations = []
        for conversation in await self.conversation_ids(tenant, user):
            key = ConversationKey(tenant, user, conversation)
            view = await self.conversation(key)
            if view is not None:
                view["chunks"] = await self.chunks_with_sources(key) or []
                view["pins"] = await self.pins(key) or []
                view["topics"] = [topic_json(t) for t in
                                  (await self.topic_store.load(key)).segments]
                conversations.append(view)
        return {"object": "memory.export", "user": user, "exported_at": self.clock(),
                "settings": {"memory": settings.memory, "auto_extract": settings.auto_extract},
                "profile": await self.profile(tenant, user),
                "facts": await self.facts_with_sources(tenant, user),
                "conversations": conversations}

    async def erase(self, tenant: str, user: str) -> Erasure:
        """Erase everything of the user. Order matters: the tombstone first (from then on no
        turn created before it is applied, enqueued, loaded or learned from), then the user's
        entries in shared structures, then its keys; then, once memory runs already under
        way have finished (their locks), a second sweep of what they wrote."""
        erased_ms = await self.store.mark_erased(tenant, user)
        entries = await self._delete_entries(tenant, user)
        deleted, locks = await self._delete_keys(tenant, user, spare_locks=True)
        complete = await self._settle(locks)
        again, _ = await self._delete_keys(tenant, user, spare_locks=False)
        entries += await self._delete_entries(tenant, user, streams=False)
        disk = await self.rewrite_disk_copies()
        return Erasure(erased_ms / 1000, deleted + again, entries, complete, disk)

    async def rewrite_disk_copies(self) -> str:
        """Ask the store to rewrite its append-only file, so what was just deleted leaves the
        disk too (until then the AOF still holds the commands that wrote it). Requests made
        while a rewrite runs are coalesced by the server into one more rewrite. Returns
        "rewrite_requested", "not_needed" (no AOF: nothing was written to disk this way) or
        "failed: <reason>" (e.g. a managed Redis that disables BGREWRITEAOF) — never raises:
        the keys are deleted either way. RDB snapshots an operator configured keep their
        copies until the next snapshot (docs/user-control-api.md, "What a delete reaches")."""
        return await rewrite_append_only_files(self.redis)

    # -- helpers -----------------------------------------------------------------------------

    def _ck(self, tenant: str, user: str, conversation: str) -> ConversationKeys:
        return self.keys.store.conversation(ConversationKey(tenant, user, conversation))

    async def _messages_of(self, key: ConversationKey) -> list[StoredMessage]:
        """The conversation's active branch (archived messages included) and archived branches
        (a source may be in any)."""
        messages, branches = await asyncio.gather(self.store.history(key),
                                                  self.store.branches(key))
        return [*messages, *(m for b in branches for m in b.messages)]

    async def _messages_of_user(self, tenant: str, user: str) -> dict[str, Json]:
        out: dict[str, Json] = {}
        for conversation in await self.conversation_ids(tenant, user):
            for m in await self._messages_of(ConversationKey(tenant, user, conversation)):
                out.setdefault(m.id, _source_json(conversation, m))
        return out

    async def _user_keys(self, tenant: str, user: str) -> list[str]:
        names: set[str] = set()
        for pattern in (self.keys.store.conversations_of(tenant, user),
                        self.keys.user_pattern(tenant, user)):
            async for name in self.redis.scan_iter(match=pattern, count=_PAGE):
                names.add(name)
        return sorted(names)

    async def _delete_keys(self, tenant: str, user: str, *,
                           spare_locks: bool) -> tuple[int, list[str]]:
        """Delete every key of the user; with `spare_locks`, memory locks held right now are
        kept (returned) so the caller can wait for their runs to end."""
        names = await self._user_keys(tenant, user)
        locks = [n for n in names if n.endswith(":m:lock")] if spare_locks else []
        spared = set(locks)
        doomed = [n for n in names if n not in spared]
        deleted = 0
        for start in range(0, len(doomed), _PAGE):
            deleted += int(await self.redis.delete(*doomed[start:start + _PAGE]))
        return deleted, locks

    async def _settle(self, locks: Sequence[str]) -> bool:
        """Wait (bounded) until none of `locks` is held; True if none is."""
        deadline = time.monotonic() + self.settle_seconds
        while locks and await self.redis.exists(*locks):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(self.poll_seconds)
        return True

    async def _delete_entries(self, tenant: str, user: str, *, streams: bool = True) -> int:
        """The user's members of the memory dirty set and dead-letter hash, and (with
        `streams`) its queued and dead-lettered record jobs and its requests in the tenant's
        request log (gateway/pipeline/request_history.py)."""
        owned = _owned_by(tenant, user)
        keys = self.keys.store
        shard = keys.shard_of(tenant, user)  # the user's entries are all on its shard's queues
        dirty = keys.memory_dirty_at(shard)
        memory_dead = keys.memory_dead_at(shard)
        removed = 0
        members = [m async for m, _ in self.redis.zscan_iter(dirty, count=_PAGE) if owned(m)]
        if members:
            removed += int(await self.redis.zrem(dirty, *members))
        fields = [f async for f, _ in self.redis.hscan_iter(memory_dead, count=_PAGE)
                  if owned(f)]
        if fields:
            removed += int(await self.redis.hdel(memory_dead, *fields))
        if streams:
            for stream in (keys.records_at(shard), keys.dead_at(shard),
                           keys.request_log(tenant)):
                removed += await self._delete_stream_entries(stream, tenant, user)
        return removed

    async def _delete_stream_entries(self, stream: str, tenant: str, user: str) -> int:
        # A recorder holding a deleted entry in its pending list acks it when it re-reads it
        # (the entry comes back without fields); the tombstone covers one being applied.
        removed, cursor = 0, "-"
        while True:
            page = await self.redis.xrange(stream, cursor, "+", count=_PAGE)
            ids = [i for i, f in page if f.get("tenant") == tenant and f.get("user") == user]
            if ids:
                removed += int(await self.redis.xdel(stream, *ids))
            if len(page) < _PAGE:
                return removed
            cursor = "(" + page[-1][0]


def _conversation_of(rest: str) -> str | None:
    """The conversation id at the start of `rest` ("<length>:<id>:..."), or None."""
    length, sep, tail = rest.partition(":")
    if not sep or not length.isdigit() or len(tail) < int(length):
        return None
    return tail[:int(length)]


def _owned_by(tenant: str, user: str) -> Callable[[str], bool]:
    def owned(member: str) -> bool:
        try:
            key = decode_key(member)
        except CodecError:
            return False
        return key.tenant == tenant and key.user == user
    return owned


def _conversation_json(conversation: str, meta: dict[str, str]) -> Json:
    def number(name: str) -> float | None:
        return float(meta[name]) if name in meta else None
    return {"object": "memory.conversation", "id": conversation,
            "message_count": int(meta.get("message_count", 0)),
            "created_at": number("created_at"), "updated_at": number("updated_at")}


def _resolved(ids: Iterable[str], messages: dict[str, Json]) -> list[Json]:
    """The source messages still stored (a deleted conversation's are gone), in id order."""
    return [messages[i] for i in ids if i in messages]


def _fact_json(fact: Fact, messages: dict[str, Json]) -> Json:
    return {"object": "memory.fact", **fact.to_dict(),
            "sources": _resolved(fact.source_ids, messages)}


def _chunk_json(chunk: SummaryChunk, messages: dict[str, Json]) -> Json:
    return {"object": "memory.chunk", "id": chunk.id, "text": chunk.text,
            "deleted": chunk.deleted, "first_position": chunk.first_position,
            "last_position": chunk.last_position, "start_date": chunk.start_date,
            "end_date": chunk.end_date, "created_at": chunk.created_at, "method": chunk.method,
            "source_ids": list(chunk.source_ids),
            "sources": _resolved(chunk.source_ids, messages)}

