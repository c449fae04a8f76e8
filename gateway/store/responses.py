"""The Responses API's stored responses: what `previous_response_id` and
`GET /v1/responses/{id}` read.

A chain of responses is a conversation: each stored response names its conversation (the
tenant-level owner key: user and conversation ids, no content) and sits in that
conversation's hash, beside `latest`, the newest response of the chain. Texts are sealed
with the tenant's key when it encrypts. Both expire `RESPONSE_TTL_SECONDS` after their last
write, as OpenAI keeps responses for 30 days.

A response is stored only if its request started after the user's last erase and the
conversation's last delete, checked in the same script that writes it (the recorder fences
turns the same way): a response in flight when its user is erased is never stored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from gateway.core.ids import ConversationKey
from gateway.store.encryption.crypto import NO_ENCRYPTION, Encryption
from gateway.store.keys import KeySpace
from gateway.store.redis_store import LATER_TOMBSTONE_LUA

RESPONSE_TTL_SECONDS = 30 * 24 * 3600
LATEST = "latest"

# KEYS: the conversation's responses hash, the user's erase tombstone, the conversation's
# delete tombstone (one slot: the user's). ARGV: response id, its text, time to live (s), when
# its request started (ms), the field naming the newest (`LATEST`). Returns 1 if stored, 0 if
# an erase or delete came after the start.
_SAVE_LUA = LATER_TOMBSTONE_LUA + """
local erased = later_tombstone(KEYS[2], KEYS[3])
if erased and tonumber(ARGV[4]) <= tonumber(erased) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], ARGV[5], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
"""


@dataclass(frozen=True, slots=True)
class StoredResponse:
    key: ConversationKey
    response: dict[str, Any]
    latest: bool
    """Whether it is the newest response of its conversation (a chain continues from there)."""


class ResponseLog:
    def __init__(self, client: aioredis.Redis, keys: KeySpace, *,
                 encryption: Encryption = NO_ENCRYPTION) -> None:
        self._redis = client
        self.keys = keys
        self.encryption = encryption
        self._save_script = client.register_script(_SAVE_LUA)

    async def save(self, key: ConversationKey, response: dict[str, Any],
                   started_at: float) -> bool:
        """Store `response` as the newest of its conversation, unless the user was erased or
        the conversation deleted since its request started (`started_at`, seconds): then
        nothing is written and the answer is False."""
        seal = self.encryption.seal
        text = seal(key.tenant, json.dumps(response, ensure_ascii=False, separators=(",", ":")))
        stored = await self._save_script(
            keys=[self.keys.responses(key), self.keys.erased(key.tenant, key.user),
                  self.keys.conversation(key).deleted],
            args=[response["id"], text, RESPONSE_TTL_SECONDS, int(started_at * 1000), LATEST])
        if not int(stored):
            return False
        # Another key (another slot in a cluster): written after the hash, so an id that
        # resolves always finds its response.
        owner = json.dumps([key.user, key.conversation], ensure_ascii=False)
        await self._redis.set(self.keys.response_owner(key.tenant, response["id"]),
                              seal(key.tenant, owner), ex=RESPONSE_TTL_SECONDS)
        return True

    async def find(self, tenant: str, response_id: str) -> StoredResponse | None:
        """The tenant's stored response `response_id`, or None (unknown, expired, deleted, or
        another tenant's: tenants never see each other's ids)."""
        owner = await self._redis.get(self.keys.response_owner(tenant, response_id))
        if owner is None:
            return None
        user, conversation = json.loads(self.encryption.open(tenant, owner))
        key = ConversationKey(tenant, user, conversation)
        text, latest = await self._redis.hmget(self.keys.responses(key), [response_id, LATEST])
        if text is None:
            return None
        return StoredResponse(key, json.loads(self.encryption.open(tenant, text)),
                              latest == response_id)
