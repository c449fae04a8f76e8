"""Importing an existing history into a conversation: the service behind
`POST /v1/memory/conversations/{id}/import` and `gateway import`.

The imported messages go through the path a live turn takes: each record
(`gateway.core.history_import.plan_import`) is enqueued with `RedisStore.record`, applied by the
recorder (same hash chain, same stored form, the conversation marked dirty), and its memory is
derived by the memory worker (PII redacted there, as for every turn). `apply` (inline mode:
the gateway's `InlineProcessing`) applies them before `run` returns; otherwise the recorder
and memory worker of a running gateway or worker do, in order, whenever they run.

Erases: the fences compare a turn's own time with the user's erase (and the conversation's
delete) tombstone, so a message dated at or before a tombstone that still lives would be
dropped by the recorder or left unlearned by the memory worker. `run` refuses such an import
whole (`ImportErased`) before enqueueing anything, rather than keep part of it; a tombstone
landing while the records are enqueued ends the import the same way (what was enqueued before
stays, and is dropped by the fence if it predates the erase).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Awaitable, Callable, Sequence

from gateway.core.history_import import ImportedMessage, ImportPlan, plan_import
from gateway.core.ids import ConversationKey
from gateway.store.redis_store import RedisStore

DEFAULT_BATCH = 64
"""Messages of one record at most (messages written at the same time share a record)."""


class ImportErased(ValueError):
    """The user's memory was erased (or the conversation deleted) at `erased_ms`, at or after
    the time of a message to import."""

    def __init__(self, erased_ms: int):
        super().__init__(f"erased at {erased_ms} ms")
        self.erased_ms = erased_ms


@dataclass(frozen=True, slots=True)
class ImportResult:
    conversation: str
    received: int
    already_stored: int
    added: int
    records: int
    applied: bool
    """True when the records were applied (and their memory derived) before the answer."""

    def to_json(self) -> dict[str, object]:
        return {"object": "memory.conversation.import", "conversation": self.conversation,
                "received": self.received, "already_stored": self.already_stored,
                "added": self.added, "records": self.records, "applied": self.applied}


class HistoryImport:
    """Imports messages into one conversation at a time; see the module docstring."""

    def __init__(self, store: RedisStore, *,
                 apply: Callable[[], Awaitable[object]] | None = None,
                 batch: int = DEFAULT_BATCH):
        self._store = store
        self._apply = apply
        self._batch = batch

    async def plan(self, key: ConversationKey,
                   messages: Sequence[ImportedMessage]) -> ImportPlan:
        """What importing `messages` would record (raises `ImportConflict`, `ImportErased`)."""
        stored = await self._store.history(key)
        plan = plan_import(messages, [m.id for m in stored], batch=self._batch,
                           request_id=f"import-{uuid.uuid4().hex[:16]}")
        erased = await self._tombstone(key)
        if erased is not None and plan.records \
                and min(r.created_at for r in plan.records) * 1000 <= erased:
            raise ImportErased(erased)
        return plan

    async def run(self, key: ConversationKey,
                  messages: Sequence[ImportedMessage]) -> ImportResult:
        plan = await self.plan(key, messages)
        for record in plan.records:
            if not await self._store.record(key, record):
                # An erase or delete landed meanwhile: the rest would be dropped too.
                raise ImportErased(await self._tombstone(key) or 0)
        applied = self._apply is not None
        if applied and plan.records:
            await self._apply()
        return ImportResult(key.conversation, len(messages), plan.known, plan.added,
                            len(plan.records), applied)

    async def _tombstone(self, key: ConversationKey) -> int | None:
        """The later of the user's erase and the conversation's delete tombstones (ms)."""
        keys = self._store.keys
        values = await self._store.client.mget(keys.erased(key.tenant, key.user),
                                               keys.conversation(key).deleted)
        return max((int(v) for v in values if v is not None), default=None)
