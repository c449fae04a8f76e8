"""Forgetting what the gateway keeps of a user (the user-control API's deletes;
gateway/http/memory_api.py is its HTTP face): a fact, a summary chunk, the profile, a
conversation, or everything of the user (`erase`). Each delete ends by having the store's
append-only files rewritten (`rewrite_disk_copies`).

Invariants:
- everything is scoped to one (tenant, user): keys come from `KeySpace` / `MemoryKeySpace`
  built from both, entries of shared structures (streams, dirty set, dead letters) are
  matched on both fields — another user's or tenant's data is never read or touched;
- `erase` leaves nothing of the user in the store except its tombstone (named by a hash, see
  `KeySpace.erased`): turns still queued are deleted, and any turn created before the erase
  that reaches a recorder, `load` or the memory worker later is dropped (see redis_store);
  a memory job under way writes nothing more (its fence: gateway/memory/jobs/fence.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import redis.asyncio as aioredis

from gateway.core.ids import ConversationKey
from gateway.memory.control import MemoryControl
from gateway.memory.records.brief_store import BriefStore
from gateway.memory.records.keys import MemoryKeySpace
from gateway.store.codec import CodecError, decode_key, encode_key
from gateway.store.disk import DiskRewrites
from gateway.store.redis_store import RedisStore

Json = dict[str, Any]
_PAGE = 500

log = logging.getLogger("gateway.memory")


@dataclass(frozen=True, slots=True)
class Erasure:
    erased_at: float
    """The store's time of the erase (seconds): turns created up to it never come back."""
    keys_deleted: int
    entries_deleted: int
    """Queued jobs, dead letters and dirty marks of the user, in shared structures."""
    complete: bool
    """True when no memory job was running on the user's conversations once the erase had
    swept them: nothing can come back. False if a job still held its lock when the erase
    stopped waiting (`settle_seconds`): its writes are refused by its fence
    (gateway/memory/jobs/fence.py), but the erase could not see it end — repeat the erase to
    confirm (it is idempotent). Jobs see the tombstone within a heartbeat and stop."""
    disk: str = "not_needed"
    """The state of copies on the store's disk (`rewrite_disk_copies`)."""

    def to_json(self) -> Json:
        return {"object": "memory.erasure", "erased_at": self.erased_at,
                "keys_deleted": self.keys_deleted, "entries_deleted": self.entries_deleted,
                "complete": self.complete, "disk": self.disk}


class MemoryErasure:
    """The user-control deletes over the store. `settle_seconds` bounds how long a delete
    waits for a memory worker still processing the conversation (its lock) before sweeping
    again what that run wrote."""

    def __init__(self, redis: aioredis.Redis, store: RedisStore,
                 keys: MemoryKeySpace | None = None, *, settle_seconds: float = 10.0,
                 poll_seconds: float = 0.05, disk: DiskRewrites | None = None,
                 disk_wait_seconds: float = 2.0):
        self.reads = MemoryControl(redis, store, keys)
        self.redis = redis
        self.store = store
        self.keys = self.reads.keys
        self.settle_seconds = settle_seconds
        self.poll_seconds = poll_seconds
        self.disk = disk
        self.disk_wait_seconds = disk_wait_seconds

    # -- one item ----------------------------------------------------------------------------

    async def delete_fact(self, tenant: str, user: str, fact_key: str) -> str | None:
        """The state of the fact's copies on disk; None if there was no such fact."""
        if await self.reads.facts.get(tenant, user, fact_key) is None:
            return None  # checked first: deleting a missing fact would still bump a version
        if not await self.reads.facts.delete(tenant, user, fact_key):
            return None
        await self._forget_briefs(tenant, user)
        return await self.rewrite_disk_copies()

    async def delete_chunk(self, key: ConversationKey, chunk_id: str) -> str | None:
        """The state of the chunk's copies on disk; None if there was no such chunk."""
        if not await self.reads.chunks.delete(key, chunk_id):
            return None
        await self.reads.user_index.remove_chunk(key, chunk_id)
        await self._forget_briefs(key.tenant, key.user)
        return await self.rewrite_disk_copies()

    async def delete_profile(self, tenant: str, user: str) -> str:
        """Forget the profile; the state of its copies on disk (`rewrite_disk_copies`)."""
        await self.reads.profiles.delete(tenant, user)
        await self._forget_briefs(tenant, user)
        return await self.rewrite_disk_copies()

    # -- a conversation ----------------------------------------------------------------------

    async def delete_conversation(self, key: ConversationKey) -> str | None:
        """Forget the conversation: transcript, branches, pending turns, meta and every memory
        key derived from it, its queued and dead-lettered jobs and its requests in the
        console's request log (no key or entry keeps its id: its tombstone, named by a hash,
        drops a job a recorder already holds — `RedisStore.delete`), its
        entries in the user-level recall index, and what the user's facts owe to it — a fact
        stated only in it is deleted, the others lose its messages from their sources
        (`core.facts.forget_sources`). The state of its copies on disk
        (`rewrite_disk_copies`); None if there was no such conversation."""
        if not await self.reads.exists(key):
            return None
        said = await self.reads.message_ids(key)
        await self._forget_response_ids([key])
        await self.store.delete(key)
        await self._delete_conversation_entries(key)
        memory = self.keys.conversation(key)
        await self._settle([memory.lock])
        await self.redis.delete(*memory.all(), self.keys.store.last_request(key),
                                self.keys.store.responses(key),
                                self.keys.store.conversation_usage(key))
        await self.reads.user_index.remove_conversation(key)
        await self.redis.zrem(self.keys.store.memory_dirty_of(key), encode_key(key))
        # After the settle: a memory run of this conversation may have been adding facts.
        await self.reads.facts.forget_sources(key.tenant, key.user, said)
        await self._forget_briefs(key.tenant, key.user)
        return await self.rewrite_disk_copies()

    # -- everything of the user ---------------------------------------------------------------

    async def erase(self, tenant: str, user: str) -> Erasure:
        """Erase everything of the user. Order matters: the tombstone first (from then on no
        turn created before it is applied, enqueued, loaded or learned from, and every
        memory job under way is fenced: none of its writes lands from then on), then the
        user's entries in shared structures, then its keys; then, once memory runs already
        under way have stopped (their locks released: a job's heartbeat sees the tombstone
        and cancels it), a second sweep."""
        erased_ms = await self.store.mark_erased(tenant, user)
        await self._forget_response_ids([ConversationKey(tenant, user, c)
                                         for c in await self.reads.conversation_ids(tenant, user)])
        entries = await self._delete_entries(tenant, user)
        deleted, locks = await self._delete_keys(tenant, user, spare_locks=True)
        complete = await self._settle(locks)
        again, _ = await self._delete_keys(tenant, user, spare_locks=False)
        entries += await self._delete_entries(tenant, user, streams=False)
        self.store.forget_cached(tenant, user)  # and whatever a load put there meanwhile
        disk = await self.rewrite_disk_copies()
        return Erasure(erased_ms / 1000, deleted + again, entries, complete, disk)

    async def rewrite_disk_copies(self) -> str:
        """Have every primary's append-only file rewritten by a rewrite that starts after what
        was just deleted (until then the files still hold it), waiting up to
        `disk_wait_seconds`: "rewritten", "pending" (it goes on in the background, and is
        resumed by the next process if this one ends first), "not_needed" (no AOF) or
        "failed: <reason>" (e.g. a managed Redis that disables BGREWRITEAOF) — never raises:
        the keys are deleted either way (gateway/store/disk.py). RDB snapshots an operator
        configured keep their copies until the next snapshot (docs/user-control-api.md,
        "What a delete reaches")."""
        if self.disk is None:
            return await DiskRewrites.once(self.redis, self.keys.store.disk_rewrite_owed(),
                                           self.disk_wait_seconds)
        return await self.disk.after_delete(self.disk_wait_seconds)

    # -- helpers -----------------------------------------------------------------------------

    async def _forget_briefs(self, tenant: str, user: str) -> None:
        """Delete every memory brief of the user's conversations after an edit of their
        memory: each is made again, without what was deleted, at its next request."""
        conversations = await self.reads.conversation_ids(tenant, user)
        await BriefStore(self.redis, self.keys).forget(
            [ConversationKey(tenant, user, c) for c in conversations])

    async def _forget_response_ids(self, keys: list[ConversationKey]) -> None:
        """The tenant-level lookups from a Responses API id to its conversation hold no content
        but the user's and the conversation's ids: they go with the conversation (its hash of
        responses, under the conversation's keys, names them)."""
        for key in keys:
            ids = [i for i in await self.redis.hkeys(self.keys.store.responses(key))
                   if i != "latest"]
            if ids:
                await self.redis.unlink(*(self.keys.store.response_owner(key.tenant, i)
                                          for i in ids))

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
            # UNLINK: the server frees a big value (a 100 MB transcript) off its main thread,
            # so no call of the batch waits on it. A failure mid-way (a 503 to the client)
            # leaves the rest for the erase repeated: it finds only what is left.
            deleted += int(await self.redis.unlink(*doomed[start:start + _PAGE]))
            if len(doomed) > _PAGE:  # progress of a big erase, for the operator
                log.info(json.dumps({"event": "erase_progress", "tenant": tenant,
                                     "keys_done": min(start + _PAGE, len(doomed)),
                                     "keys_total": len(doomed)}))
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

    async def _delete_conversation_entries(self, key: ConversationKey) -> int:
        keys = self.keys.store
        shard = keys.shard_of(key.tenant, key.user)
        removed = 0
        for stream in (keys.records_at(shard), keys.dead_at(shard),
                       keys.request_log(key.tenant)):
            removed += await self._delete_stream_entries(stream, key.tenant, key.user,
                                                         key.conversation)
        return removed

    async def _delete_stream_entries(self, stream: str, tenant: str, user: str,
                                     conversation: str | None = None) -> int:
        """The entries of the user (of one of its conversations, if named) in `stream`."""
        # A recorder holding a deleted entry in its pending list acks it when it re-reads it
        # (the entry comes back without fields); the tombstone covers one being applied.
        removed, cursor = 0, "-"
        while True:
            page = await self.redis.xrange(stream, cursor, "+", count=_PAGE)
            ids = [i for i, f in page if f.get("tenant") == tenant and f.get("user") == user
                   and (conversation is None or f.get("conversation") == conversation)]
            if ids:
                removed += int(await self.redis.xdel(stream, *ids))
            if len(page) < _PAGE:
                return removed
            cursor = "(" + page[-1][0]


def _owned_by(tenant: str, user: str) -> Callable[[str], bool]:
    def owned(member: str) -> bool:
        try:
            key = decode_key(member)
        except CodecError:
            return False
        return key.tenant == tenant and key.user == user
    return owned
