"""The Responses API's stored responses: what `previous_response_id` and
`GET /v1/responses/{id}` read.

A chain of responses is a conversation: each stored response names its conversation (the
tenant-level owner key: user and conversation ids, no content) and sits in that
conversation's hash, beside `latest`, the newest response of the chain. Texts are sealed
with the tenant's key when it encrypts. Both expire `RESPONSE_TTL_SECONDS` after their last
write, as OpenAI keeps responses for 30 days.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from gateway.core.ids import ConversationKey
from gateway.store.encryption.crypto import NO_ENCRYPTION, Encryption
from gateway.store.keys import KeySpace

RESPONSE_TTL_SECONDS = 30 * 24 * 3600
LATEST = "latest"


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

    async def save(self, key: ConversationKey, response: dict[str, Any]) -> None:
        """Store `response` as the newest of its conversation."""
        seal = self.encryption.seal
        name = self.keys.responses(key)
        text = seal(key.tenant, json.dumps(response, ensure_ascii=False, separators=(",", ":")))
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(name, mapping={response["id"]: text, LATEST: response["id"]})
            pipe.expire(name, RESPONSE_TTL_SECONDS)
            await pipe.execute()
        # Another key (another slot in a cluster): written after the hash, so an id that
        # resolves always finds its response.
        owner = json.dumps([key.user, key.conversation], ensure_ascii=False)
        await self._redis.set(self.keys.response_owner(key.tenant, response["id"]),
                              seal(key.tenant, owner), ex=RESPONSE_TTL_SECONDS)

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
