"""Console sessions: signed in with an admin key, kept server-side in the store.

Invariants:
- the admin key is never stored nor sent back: sign-in checks it (`AdminKeys.holds`) and
  creates a random session id; the cookie holds only that id, and the store only the sha256
  of it (a store dump does not hand out sessions);
- a session expires `session_ttl_seconds` after sign-in (the key's TTL); sign-out deletes it;
- every session has its own random CSRF token, which every POST form carries and `check_csrf`
  compares in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

import redis.asyncio as aioredis

from gateway.store.keys import KeySpace

COOKIE = "gw_console"
COOKIE_PATH = "/console"


@dataclass(frozen=True, slots=True)
class Session:
    id: str
    csrf: str

    def check_csrf(self, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(self.csrf.encode(), str(token).encode())


class SessionStore:
    def __init__(self, redis: aioredis.Redis, keys: KeySpace, ttl_seconds: int):
        self.redis = redis
        self.keys = keys
        self.ttl_seconds = ttl_seconds

    def _key(self, session_id: str) -> str:
        return self.keys.console_session(hashlib.sha256(session_id.encode()).hexdigest())

    async def create(self) -> Session:
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32))
        async with self.redis.pipeline(transaction=True) as pipe:  # never without its TTL
            pipe.hset(self._key(session.id), mapping={"csrf": session.csrf})
            pipe.expire(self._key(session.id), self.ttl_seconds)
            await pipe.execute()
        return session

    async def get(self, session_id: str | None) -> Session | None:
        """The live session of this id; None if there is none (expired, signed out, forged)."""
        if not session_id or len(session_id) > 128:
            return None
        csrf = await self.redis.hget(self._key(session_id), "csrf")
        return Session(session_id, csrf) if csrf else None

    async def delete(self, session_id: str) -> None:
        await self.redis.delete(self._key(session_id))
