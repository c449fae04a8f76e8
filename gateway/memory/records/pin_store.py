"""A conversation's pinned messages in Redis (gateway/core/context/pinned.py says what a pin is).

Layout (gateway/memory/records/keys.py): the hash `pins` maps a pinned message's id to its JSON
`{"id", "message" (the message as the client sent it, OpenAI shape), "source", "pinned_at"}`.
The pin holds the message itself: the request path reads the pins with its other memory
reads (one round trip) and needs nothing else, and a pin outlives the branch it was made on
(a pin never ages out). The key sits under the conversation's base, so deleting the
conversation or erasing the user removes it.

Invariants:
- a conversation holds at most `MAX_PINS` pins, of which at most `MAX_RULE_PINS` were made
  by the importance rule (the request path reads them all, and the block has a share);
- the rule never overrides a pin made by the client or the API, and a client or API pin of a
  message the rule pinned takes it over (its source changes, its place — `pinned_at` — stays);
- an entry that cannot be decoded (a foreign write) is skipped and logged, never fatal.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Mapping, Sequence

import redis.asyncio as aioredis
from redis.exceptions import WatchError

from gateway.core.ids import ConversationKey
from gateway.core.context.blocks import PinnedMessage
from gateway.core.messages import Message
from gateway.memory.records.keys import MemoryKeySpace
from gateway.memory.records.writes import Direct, Writes
from gateway.store.encryption.crypto import NO_ENCRYPTION, Encryption

log = logging.getLogger("gateway.memory.pins")

MAX_PINS = 100
MAX_RULE_PINS = 20
"""The rule pins what users state, so a long conversation could pin a great deal; beyond
this many, the rule pins no more (the first ones stay: pins never age out)."""
_PIN_ATTEMPTS = 5  # transactions on one conversation's pins; contention is short-lived
SOURCES = ("client", "rule", "api")


def pin_to_json(pin: PinnedMessage) -> str:
    return json.dumps({"id": pin.id, "message": pin.message.to_openai(), "source": pin.source,
                       "pinned_at": pin.pinned_at}, ensure_ascii=False, separators=(",", ":"))


def pin_from_json(text: str | bytes) -> PinnedMessage:
    """The pin, or ValueError for text that is not one."""
    try:
        data: Any = json.loads(text)
        source = data["source"]
        if source not in SOURCES:
            raise ValueError(f"unknown source {source!r}")
        message = data["message"]
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ValueError("not a message")
        return PinnedMessage(id=str(data["id"]), message=Message.from_openai(message),
                             source=source, pinned_at=float(data.get("pinned_at", 0.0)))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"not a pin: {exc!r}") from exc


def pin_json(pin: PinnedMessage) -> dict[str, Any]:
    """A pin as the memory API shows it."""
    return {"object": "memory.pin", "id": pin.id, "source": pin.source,
            "pinned_at": pin.pinned_at, "message": pin.message.to_openai()}


class PinLimitReached(Exception):
    """The conversation already holds MAX_PINS pins."""


class PinStore:
    def __init__(self, redis: aioredis.Redis, keys: MemoryKeySpace | None = None, *,
                 encryption: Encryption = NO_ENCRYPTION) -> None:
        """`encryption` seals each pin's JSON (the field, a message id, is a hash)."""
        self.redis = redis
        self.keys = keys or MemoryKeySpace()
        self.encryption = encryption

    def key(self, key: ConversationKey) -> str:
        """The hash `parse` reads whole (for callers batching their reads)."""
        return self.keys.conversation(key).pins

    def parse(self, raw: Mapping[str, str], key: ConversationKey) -> tuple[PinnedMessage, ...]:
        """The pins of an HGETALL reply of `key`'s pins, oldest pin first (ties by id)."""
        pins = []
        for field, text in raw.items():
            try:
                pins.append(pin_from_json(self.encryption.open(key.tenant, text)))
            except ValueError as exc:
                log.warning("skipping pin %s: %s", field, exc)
        return tuple(sorted(pins, key=lambda p: (p.pinned_at, p.id)))

    async def list(self, key: ConversationKey) -> tuple[PinnedMessage, ...]:
        return self.parse(await self.redis.hgetall(self.key(key)), key)

    async def pin(self, key: ConversationKey,
                  pins: Sequence[PinnedMessage]) -> tuple[PinnedMessage, ...]:
        """Pin `pins` (made by the client or the API); returns each as stored. A message
        already pinned keeps its place; one the rule pinned becomes theirs. Raises
        PinLimitReached, pinning none of them, if the new ones would pass MAX_PINS."""
        if not pins:
            return ()
        name = self.key(key)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hmget(name, [p.id for p in pins])
            pipe.hlen(name)
            found, count = await pipe.execute()
        stored: dict[str, PinnedMessage] = {}
        found = [self.encryption.open_or_none(key.tenant, text) for text in found]
        for pin, text in zip(pins, found):
            old = _decoded(text)
            if old is None:
                stored[pin.id] = pin
            elif old.source == "rule":
                stored[pin.id] = PinnedMessage(pin.id, pin.message, pin.source, old.pinned_at)
        new = sum(1 for pin, text in zip(pins, found) if text is None and pin.id in stored)
        if count + new > MAX_PINS:
            raise PinLimitReached(f"a conversation holds at most {MAX_PINS} pins")
        if stored:
            await self.redis.hset(name, mapping={i: self._sealed(key, p)
                                                 for i, p in stored.items()})
        return tuple(stored.get(p.id) or _decoded(t) or p for p, t in zip(pins, found))

    async def pin_by_rule(self, key: ConversationKey, pins: Sequence[PinnedMessage], *,
                          writes: Writes | None = None) -> int:
        """Pin what the importance rule picked, where nothing is pinned yet and within the
        limits; returns how many were pinned. A transaction of `writes` (the memory job's
        fence; default: direct) WATCHing the pins, tried again when a pin is made meanwhile."""
        if not pins:
            return 0
        name = self.key(key)
        writes = writes or Direct(self.redis)
        for _ in range(_PIN_ATTEMPTS):
            async with writes.transaction(name) as pipe:
                existing = self.parse(await pipe.hgetall(name), key)
                room = min(MAX_RULE_PINS - sum(1 for p in existing if p.source == "rule"),
                           MAX_PINS - len(existing))
                known = {p.id for p in existing}
                chosen = list({p.id: p for p in pins if p.id not in known}.values())
                chosen = chosen[:max(0, room)]
                if not chosen:
                    return 0
                pipe.multi()
                pipe.hset(name, mapping={p.id: self._sealed(key, p) for p in chosen})
                try:
                    await pipe.execute()
                except WatchError:
                    continue
                return len(chosen)
        raise WatchError(f"pins of {key} kept changing; gave up")

    def _sealed(self, key: ConversationKey, pin: PinnedMessage) -> str:
        return self.encryption.seal(key.tenant, pin_to_json(pin))

    async def unpin(self, key: ConversationKey, message_id: str) -> bool:
        return bool(await self.redis.hdel(self.key(key), message_id))


def _decoded(text: str | None) -> PinnedMessage | None:
    if text is None:
        return None
    try:
        return pin_from_json(text)
    except ValueError:
        return None  # a foreign write: overwritten by a valid pin
