"""A memory brief is never stored after an erase or a conversation delete that came after the
memory it was made from was read: the write checks both tombstones in its own transaction."""

from __future__ import annotations

import time

from gateway.core.context.brief import Brief
from gateway.core.ids import ConversationKey
from gateway.memory.records.brief_store import BriefStore, StoredBrief
from gateway.memory.records.keys import MemoryKeySpace
from gateway.store.redis_store import RedisStore

KEY = ConversationKey("acme", "erin", "trip")
CANARY = Brief(text="<memory>Erin's passport number is Quorvex-77</memory>", tokens=12)


def brief() -> StoredBrief:
    return StoredBrief(CANARY, 400, time.time())


async def stored_text(redis_client) -> list[str]:
    return [await redis_client.get(n) async for n in redis_client.scan_iter(count=1000)
            if ":m:brief" in n]


async def test_a_brief_read_before_the_erase_is_not_stored(redis_client):
    briefs = BriefStore(redis_client, MemoryKeySpace())
    read_at = time.time() - 1
    await RedisStore(redis_client).mark_erased(KEY.tenant, KEY.user)
    assert await briefs.put(KEY, brief(), read_at=read_at) is False
    assert await stored_text(redis_client) == []
    assert await briefs.get(KEY) is None


async def test_a_brief_read_before_the_conversation_was_deleted_is_not_stored(redis_client):
    store, briefs = RedisStore(redis_client), BriefStore(redis_client, MemoryKeySpace())
    read_at = time.time() - 1
    await store.delete(KEY)
    assert await briefs.put(KEY, brief(), read_at=read_at) is False
    assert await stored_text(redis_client) == []


async def test_a_brief_read_after_the_erase_is_stored(redis_client):
    briefs = BriefStore(redis_client, MemoryKeySpace())
    await RedisStore(redis_client).mark_erased(KEY.tenant, KEY.user)
    time.sleep(0.01)
    assert await briefs.put(KEY, brief(), read_at=time.time()) is True
    assert (await briefs.get(KEY)).brief == CANARY
