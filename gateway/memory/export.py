"""A user's export (`GET /v1/memory/export`) written as it is read: chunked JSON in constant
memory, however much the user holds, with no store call larger than a page.

Every list is read a page at a time (gateway/memory/pages.py), so no store call nears the
store's timeout however much a user holds (why: docs/decisions.md, "Exports and the memory API
read a page at a time"), and each message is written out before the next page is read;
what needs the messages — the sources of facts and summary chunks — is collected on the way,
for the ids it names only, and written after them (`facts` comes last in the document).

The document is the one `MemoryControl.export` describes, but for turns received and not yet
applied by the recorder: listed per conversation in `pending` (as they were sent) rather than
merged into `messages`. A conversation written while it is exported may show a message moved
to its archive meanwhile once more, never lose it (`MessagePages.active`).

Errors: the first store reads (settings, profile, facts, the conversation ids) happen before
the answer starts, so a store that is down still gets a 503. A store failure after the first
byte cuts the body short (its JSON does not parse): the client asks again.
"""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Iterable

from gateway.core.ids import ConversationKey
from gateway.core.messages import StoredMessage
from gateway.memory.control import MemoryControl
from gateway.memory.records.brief_store import BriefStore, brief_json
from gateway.memory.records.pin_store import pin_json
from gateway.memory.records.topic_store import topic_json
from gateway.memory.pages import PAGE, MessagePages
from gateway.memory.rendering import (chunk_json, conversation_json, fact_json, message_json,
                                      source_json)
from gateway.store.codec import decode_record

Json = dict[str, Any]


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode(
        "utf-8", "surrogatepass")


class Export:
    """One export: `opening()` reads what comes first (and may fail before any byte is sent),
    then `body()` yields the document's bytes."""

    def __init__(self, control: MemoryControl, tenant: str, user: str):
        self.control = control
        self.tenant, self.user = tenant, user
        self.store = control.store
        self.redis = control.redis
        self.pages = MessagePages(control.redis, control.store)
        self._head: Json = {}
        self._facts: list[Any] = []
        self._ids: list[str] = []

    async def opening(self) -> None:
        control, tenant, user = self.control, self.tenant, self.user
        settings = await control.settings.get(tenant, user)
        self._head = {"object": "memory.export", "user": user, "exported_at": control.clock(),
                      "settings": {"memory": settings.memory,
                                   "auto_extract": settings.auto_extract},
                      "profile": await control.profile(tenant, user)}
        self._facts = await control.facts.list(tenant, user)
        self._ids = await control.conversation_ids(tenant, user)

    async def body(self) -> AsyncIterator[bytes]:
        wanted = {i for fact in self._facts for i in fact.source_ids}
        sources: dict[str, Json] = {}
        yield _dumps(self._head)[:-1] + b',"conversations":['
        first = True
        for conversation in self._ids:
            key = ConversationKey(self.tenant, self.user, conversation)
            async for piece in self._conversation(key, wanted, sources, first):
                yield piece
                first = False
        yield b'],"facts":' + _dumps([fact_json(f, sources) for f in self._facts]) + b"}"

    async def conversation(self, key: ConversationKey) -> AsyncIterator[bytes]:
        """One conversation as the export writes it (the answer of
        `GET /v1/memory/conversations/{id}`); nothing if it does not exist."""
        async for piece in self._conversation(key, set(), {}, True):
            yield piece

    async def _conversation(self, key: ConversationKey, wanted: set[str],
                            sources: dict[str, Json], first: bool) -> AsyncIterator[bytes]:
        meta = await self.store.meta(key)
        if not meta and not await self.control.exists(key):
            return  # deleted since the ids were listed
        chunks = await self.control.chunks.list(key)
        chunk_ids = {i for chunk in chunks for i in chunk.source_ids}
        chunk_sources: dict[str, Json] = {}

        def note(messages: Iterable[StoredMessage]) -> None:
            for m in messages:
                if m.id in wanted and m.id not in sources:
                    sources[m.id] = source_json(key.conversation, m)
                if m.id in chunk_ids:
                    chunk_sources[m.id] = source_json(key.conversation, m)

        head = _dumps(conversation_json(key.conversation, meta))
        yield (b"" if first else b",") + head[:-1] + b',"messages":['
        comma = b""
        async for page in self.pages.active(key):
            note(page)
            yield comma + b",".join(_dumps(message_json(m)) for m in page)
            comma = b","
        yield b'],"pending":' + _dumps(await self._pending(key)) + b',"branches":['
        index = 0
        async for branch in self.pages.branches(key):  # one branch a call
            note(branch.messages)
            yield (b"," if index else b"") + _dumps(
                {"archived_at": branch.archived_at,
                 "messages": [message_json(m) for m in branch.messages]})
            index += 1
        pins = [pin_json(p) for p in await self.control.pin_store.list(key)]
        topics = [topic_json(t) for t in (await self.control.topic_store.load(key)).segments]
        brief = brief_json(await BriefStore(self.redis, self.control.keys,
                                            encryption=self.store.encryption).get(key))
        yield (b'],"chunks":' + _dumps([chunk_json(c, chunk_sources) for c in chunks])
               + b',"pins":' + _dumps(pins) + b',"topics":' + _dumps(topics)
               + b',"brief":' + _dumps(brief) + b"}")

    async def _pending(self, key: ConversationKey) -> list[Json]:
        """Turns received and not yet applied, by seq (`HSCAN`: a page at a time)."""
        turns: list[tuple[int, Json]] = []
        pending = self.store.keys.conversation(key).pending
        async for seq, text in self.redis.hscan_iter(pending, count=PAGE):
            turn = decode_record(self._open(key, text))
            turns.append((int(seq), {"seq": int(seq), "created_at": turn.created_at,
                                     "messages": [m.to_openai() for m in turn.messages]}))
        return [turn for _, turn in sorted(turns, key=lambda t: t[0])]

    def _open(self, key: ConversationKey, text: str) -> str:
        return self.store.encryption.open(key.tenant, text)
