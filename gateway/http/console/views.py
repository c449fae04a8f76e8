"""What the console's pages show, read from the store (handlers in routes.py only render it).

Every read goes through `MemoryControl` (the user-control API's logic) or the request history,
scoped to one tenant, one user, one conversation as the page names them. Listings are bounded:
users are found by SCAN, one page of `USERS_PER_PAGE` at a time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from gateway.core.memory.facts import Fact, fact_text
from gateway.core.ids import ConversationKey
from gateway.memory.control import MemoryControl
from gateway.memory.records.brief_store import BriefStore, brief_json
from gateway.memory.records.pin_store import pin_json
from gateway.pipeline.request_history import last_request, recent_requests
from gateway.store.keys import KeySpace, _part

Json = dict[str, Any]
USERS_PER_PAGE = 100
_SCAN_COUNT = 500
_MAX_SCAN_ROUNDS = 200
"""A page stops after this many SCAN calls even if it found fewer users (a huge keyspace)."""


def parts(text: str, count: int) -> tuple[list[str], str] | None:
    """The first `count` length-prefixed parts of `text` ("3:abc:2:de:rest") and the rest."""
    out = []
    for _ in range(count):
        length, sep, tail = text.partition(":")
        if not sep or not length.isdigit() or len(tail) < int(length):
            return None
        out.append(tail[:int(length)])
        text = tail[int(length):].removeprefix(":")
    return out, text


@dataclass(frozen=True, slots=True)
class UserPage:
    users: list[str]
    next_cursor: int
    """0: no further page."""


async def users_page(redis: aioredis.Redis, keys: KeySpace, tenant: str,
                     cursor: int) -> UserPage:
    """One page of the tenant's users that have a conversation, from SCAN `cursor` (in a
    cluster, SCAN has a cursor per node: `cursor` is then an offset in the sorted users)."""
    if keys.cluster:
        users = sorted({user async for user in _users(redis, keys, tenant)})
        page = users[cursor:cursor + USERS_PER_PAGE]
        following = cursor + USERS_PER_PAGE
        return UserPage(page, following if following < len(users) else 0)
    base = f"{keys.prefix}:c:{_part(tenant)}:"
    found: set[str] = set()
    for _ in range(_MAX_SCAN_ROUNDS):
        cursor, names = await redis.scan(cursor, match=base + "*:meta", count=_SCAN_COUNT)
        for name in names:
            parsed = parts(name.removeprefix(base), 2)
            if parsed is not None and parsed[1] == "meta":
                found.add(parsed[0][0])
        if cursor == 0 or len(found) >= USERS_PER_PAGE:
            break
    return UserPage(sorted(found), cursor)


async def _users(redis: aioredis.Redis, keys: KeySpace, tenant: str) -> Any:
    """Every user of `tenant` with a conversation, over every node (duplicates possible)."""
    base = f"{keys.prefix}:c:{_part(tenant)}:"
    async for name in redis.scan_iter(match=f"{keys.scan_head()}:c:{_part(tenant)}:*:meta",
                                      count=_SCAN_COUNT):
        untagged = keys.untagged(name)
        parsed = parts(untagged.removeprefix(base), 2) if untagged.startswith(base) else None
        if parsed is not None and parsed[1] == "meta":
            yield parsed[0][0]


async def find_conversation(redis: aioredis.Redis, keys: KeySpace, tenant: str,
                            conversation: str) -> list[str]:
    """The users of `tenant` that have a conversation of this id."""
    base = f"{keys.prefix}:c:{_part(tenant)}:"
    users = set()
    async for name in redis.scan_iter(
            match=f"{keys.scan_head()}:c:{_part(tenant)}:*:{_part(conversation)}:meta",
            count=_SCAN_COUNT):
        name = keys.untagged(name)
        if not name.startswith(base):
            continue
        parsed = parts(name.removeprefix(base), 2)
        if parsed is not None and parsed[0][1] == conversation and parsed[1] == "meta":
            users.add(parsed[0][0])
    return sorted(users)


CONVERSATIONS_SHOWN = 1000


async def user_view(control: MemoryControl, tenant: str, user: str) -> Json:
    # The page lists the first CONVERSATIONS_SHOWN (by id); the API pages through all.
    conversations, _more = await control.conversations(tenant, user,
                                                      limit=CONVERSATIONS_SHOWN)
    facts = await control.facts_with_sources(tenant, user)
    return {"conversations": conversations, "facts": facts,
            "profile": await control.profile(tenant, user),
            "settings": await control.get_settings(tenant, user)}


async def conversation_view(control: MemoryControl, redis: aioredis.Redis,
                            key: ConversationKey) -> Json | None:
    """The transcript, its memory brief, summary chunks, pins and topics, and its last
    request with the recalled items resolved to their text where the store still has them;
    None if there is no such conversation."""
    view = await control.conversation(key)
    if view is None:
        return None
    chunks = await control.chunks_with_sources(key) or []
    pins = [pin_json(p) for p in await control.pin_store.list(key)]
    last = await last_request(redis, control.keys.store, key)
    facts = await control.facts.list(key.tenant, key.user)
    texts = _item_texts(view["messages"], chunks, facts)
    # Items of the user's other conversations ("<conversation>/<id>"), as the user-level
    # recall index holds them: the text the model was shown (redacted).
    others = [i["id"] for i in (last or {}).get("recalled_items", []) if "/" in i.get("id", "")]
    if others:
        entries = await redis.hmget(control.keys.user(key.tenant, key.user).recall, others)
        texts.update({i: _entry_text(control.store.encryption.open(key.tenant, e))
                      for i, e in zip(others, entries) if e})
    recalled = [{**item, "text": texts.get(item.get("id", ""))}
                for item in (last or {}).get("recalled_items", [])]
    topics = await control.topics(key) or {}
    brief = await BriefStore(redis, control.keys, encryption=control.store.encryption).get(key)
    return {**view, "chunks": chunks, "pins": pins, "last_request": last,
            "recalled": recalled, "topics": topics.get("data", []), "brief": brief_json(brief)}


async def request_log(redis: aioredis.Redis, keys: KeySpace, tenant: str,
                      count: int) -> list[Json]:
    return await recent_requests(redis, keys, tenant, count)


def _entry_text(raw: str) -> str:
    try:
        entry = json.loads(raw)
    except ValueError:
        return ""
    return str(entry.get("text", "")) if isinstance(entry, dict) else ""


def _item_texts(messages: list[Json], chunks: list[Json], facts: list[Fact]) -> dict[str, str]:
    """Recalled item id -> the text it stands for (ids as `Recollection.id` names them)."""
    texts: dict[str, str] = {}
    for message in messages:
        content = message["message"].get("content")
        texts[message["id"]] = content if isinstance(content, str) else str(content or "")
    for chunk in chunks:
        texts[chunk["id"]] = chunk["text"]
    for fact in facts:
        texts[f"fact:{fact.key}"] = fact_text(fact)  # as the model is shown it
    return texts
