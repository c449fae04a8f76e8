"""A user's long-term facts in Redis: one hash (key -> JSON fact), their vectors beside it.

Writes go through the pure policy in `gateway.core.memory.facts` (upsert by key, dedupe by embedding
similarity, age out, cap) and are committed with WATCH/MULTI on the facts hash, so two
conversations of one user updating facts at once cannot lose each other's update (the loser
recomputes). Vectors follow in their own transaction (`put_vectors`/`delete_vectors`, which
bump the user's version): a search between the two sees a fact's old vector at worst, and
`recall` drops hits whose fact is gone.

Encryption (`encryption`): each fact's JSON is sealed, and the hash fields of both hashes are
the tenant's keyed names of the fact keys (a key can hold user content: `prefers_<thing>`); the
fact key itself is read from the JSON. Without encryption a field is the fact key.

Isolation: every key is built from (tenant, user) by `MemoryKeySpace.user`; every search names
`Namespace.of_facts(tenant, user)`. Nothing here can read another user's facts.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Awaitable, Callable, Sequence

import numpy as np
import redis.asyncio as aioredis
from redis.exceptions import WatchError

from gateway.core.memory import facts as policy
from gateway.core.memory.extraction import VOCABULARY
from gateway.core.memory.facts import Fact, FactPolicy
from gateway.core.recall.recollection import Recollection
from gateway.memory.records.keys import MemoryKeySpace, UserMemoryKeys
from gateway.memory.ports import Namespace, VectorIndex
from gateway.memory.records.vector_store import (ForeignVector, decode_vector, delete_vectors,
                                         put_vectors)
from gateway.memory.records.writes import Direct, Writes
from gateway.store.encryption.crypto import NO_ENCRYPTION, Encryption
from gateway.store.versions import bump_version

log = logging.getLogger(__name__)

Embed = Callable[[Sequence[str]], Awaitable[np.ndarray]]
_MAX_ATTEMPTS = 5


class FactStore:
    def __init__(self, redis: aioredis.Redis, keys: MemoryKeySpace, embed: Embed, *,
                 related_threshold: float = 0.85, policy: FactPolicy = FactPolicy(),
                 clock: Callable[[], float] = time.time,
                 encryption: Encryption = NO_ENCRYPTION, space: str | None = None) -> None:
        """`embed` returns L2-normalised float32 rows (EmbeddingService.embed), vectors of
        `space` (vector_store.space_of; None: a store that never embeds, as the memory API's);
        `related_threshold` is the embedder's: at or above it two facts are duplicates."""
        self.space = space
        self.redis = redis
        self.encryption = encryption
        self.keys = keys
        self.embed = embed
        self.related_threshold = related_threshold
        self.policy = policy
        self.direct = Direct(redis)
        self.clock = clock

    def _keys(self, tenant: str, user: str) -> UserMemoryKeys:
        return self.keys.user(tenant, user)

    def _fields(self, tenant: str, keys: Sequence[str]) -> list[str]:
        """The hash fields of fact keys (see the module docstring)."""
        return [self.encryption.name(tenant, k) for k in keys]

    def _decoded(self, tenant: str, raw: dict[str, str | None]) -> dict[str, Fact]:
        """Facts by fact key from hash fields -> stored text; an undecodable entry is logged
        and skipped (it stays in the store)."""
        out = {}
        for field_name, text in raw.items():
            if text is None:
                continue
            try:
                fact = Fact.from_dict(json.loads(self.encryption.open(tenant, text)))
            except (ValueError, KeyError, TypeError) as exc:  # DecryptError is a ValueError
                log.warning("stored fact %r is unreadable (%s); ignored", field_name, exc)
                continue
            out[fact.key] = fact
        return out

    async def list(self, tenant: str, user: str) -> list[Fact]:
        """Every stored fact of the user, by key."""
        raw = await self.redis.hgetall(self._keys(tenant, user).facts)
        return sorted(self._decoded(tenant, raw).values(), key=lambda f: f.key)

    async def get(self, tenant: str, user: str, key: str) -> Fact | None:
        field_name = self.encryption.name(tenant, key)
        raw = await self.redis.hget(self._keys(tenant, user).facts, field_name)
        return self._decoded(tenant, {field_name: raw}).get(key) if raw is not None else None

    async def delete(self, tenant: str, user: str, key: str) -> bool:
        """Forget one fact and its vector; False if there was none."""
        keys = self._keys(tenant, user)
        fields = self._fields(tenant, [key])
        removed = await self.redis.hdel(keys.facts, *fields)
        await delete_vectors(self.redis, keys.fact_vectors, keys.version, fields)
        return bool(removed)

    async def delete_all(self, tenant: str, user: str) -> None:
        keys = self._keys(tenant, user)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(keys.facts, keys.fact_vectors)
            bump_version(pipe, keys.version)
            await pipe.execute()

    async def forget_sources(self, tenant: str, user: str, gone: frozenset[str]) -> int:
        """Apply `core.facts.forget_sources` to every fact of the user (a conversation was
        deleted): facts resting only on `gone` are deleted with their vectors, the others lose
        those ids. Returns how many facts were deleted. No fact's value changes, so no vector
        needs embedding again."""
        async def forget(before: dict[str, Fact]) -> dict[str, Fact]:
            after = {k: policy.forget_sources(f, gone) for k, f in before.items()}
            return {k: f for k, f in after.items() if f is not None}

        keys = self._keys(tenant, user)
        written = await self._rewrite(tenant, user, forget, self.direct)
        if written is None:
            return 0
        _before, _changed, dropped = written
        await delete_vectors(self.redis, keys.fact_vectors, keys.version,
                             self._fields(tenant, dropped))
        return len(dropped)

    async def upsert(self, tenant: str, user: str, new: Sequence[Fact],
                     now: float | None = None, *, writes: Writes | None = None) -> list[Fact]:
        """Apply `new` in order (see core.facts.upsert) at `now` (default: the clock), then
        age out and cap; returns the facts written (added or changed). Raises WatchError if
        the hash kept changing. `writes`: whose transactions write (the memory job's fence;
        default: direct)."""
        if not new:
            return []
        writes = writes or self.direct
        keys = self._keys(tenant, user)
        written = await self._rewrite(
            tenant, user, lambda before: self._apply(tenant, keys, before, new, now), writes)
        if written is None:
            return []
        before, changed, dropped = written
        await self._write_vectors(tenant, keys, before, changed, dropped, writes)
        return changed

    async def _rewrite(
            self, tenant: str, user: str,
            compute: Callable[[dict[str, Fact]], Awaitable[dict[str, Fact]]], writes: Writes,
    ) -> tuple[dict[str, Fact], list[Fact], list[str]] | None:
        """Replace the user's facts by `compute(facts as stored)` in one optimistic
        transaction (retried when the hash changed meanwhile), bumping the version. Returns
        (before, changed or added, dropped keys), or None when nothing changed. Raises
        WatchError if the hash kept changing."""
        keys = self._keys(tenant, user)
        for attempt in range(_MAX_ATTEMPTS):
            async with writes.transaction(keys.facts) as pipe:
                before = self._decoded(tenant, await pipe.hgetall(keys.facts))
                after = await compute(before)
                changed = [f for f in after.values() if before.get(f.key) != f]
                dropped = [k for k in before if k not in after]
                if not changed and not dropped:
                    await pipe.unwatch()
                    return None
                pipe.multi()
                if changed:
                    seal = self.encryption.seal
                    pipe.hset(keys.facts, mapping={
                        self.encryption.name(tenant, f.key):
                            seal(tenant, json.dumps(f.to_dict(), ensure_ascii=False))
                        for f in changed})
                if dropped:
                    pipe.hdel(keys.facts, *self._fields(tenant, dropped))
                bump_version(pipe, keys.version)
                try:
                    await pipe.execute()
                except WatchError:
                    log.info("facts of %s/%s changed meanwhile; retrying (%d)", tenant, user,
                             attempt + 1)
                    continue
            return before, changed, dropped
        raise WatchError(f"facts of {tenant}/{user} kept changing; gave up")

    async def _apply(self, tenant: str, keys: UserMemoryKeys, before: dict[str, Fact],
                     new: Sequence[Fact], now: float | None) -> dict[str, Fact]:
        now = self.clock() if now is None else now
        current = tuple(before.values())
        fresh = [f for f in new if f.key not in before]
        if fresh and before:
            # Duplicates by meaning: a new key close to an existing fact takes that key.
            queries = await self.embed([policy.fact_text(f) for f in fresh])
            vectors = await self._vectors(tenant, keys, before, queries.shape[1])
            similarity = {id(f): {k: float(np.dot(q, v)) for k, v in vectors.items()}
                          for f, q in zip(fresh, queries)}
        else:
            similarity = {}
        for fact in new:
            if id(fact) in similarity:
                fact = policy.dedupe_key(current, fact, similarity[id(fact)],
                                         self.related_threshold, VOCABULARY)
            current = policy.upsert(current, fact, now)
        return {f.key: f for f in policy.apply_policy(current, now, self.policy)}

    async def _vectors(self, tenant: str, keys: UserMemoryKeys, facts: dict[str, Fact],
                       dim: int) -> dict[str, np.ndarray]:
        """Stored vectors of `facts`; a fact without one, or with one of another vector space
        (another embedder), is embedded now."""
        raw = await self.redis.hgetall(keys.fact_vectors)
        out: dict[str, np.ndarray] = {}
        missing = []
        for key in facts:
            try:
                out[key] = decode_vector(raw[self.encryption.name(tenant, key)], dim,
                                         self._space())
            except (KeyError, ForeignVector):
                missing.append(key)
        if missing:
            rows = await self.embed([policy.fact_text(facts[k]) for k in missing])
            out.update(zip(missing, rows))
        return out

    async def _write_vectors(self, tenant: str, keys: UserMemoryKeys, before: dict[str, Fact],
                             changed: list[Fact], dropped: list[str], writes: Writes) -> None:
        # A fact whose text is unchanged (refreshed, re-sourced) keeps its vector.
        stale = [f for f in changed if f.key not in before
                 or policy.fact_text(before[f.key]) != policy.fact_text(f)]
        if stale:
            matrix = await self.embed([policy.fact_text(f) for f in stale])
            await put_vectors(self.redis, keys.fact_vectors, keys.version,
                              self._fields(tenant, [f.key for f in stale]), matrix,
                              self._space(), writes=writes)
        await delete_vectors(self.redis, keys.fact_vectors, keys.version,
                             self._fields(tenant, dropped), writes=writes)

    def _space(self) -> str:
        if self.space is None:
            raise ValueError("this FactStore has no vector space: it cannot embed")
        return self.space

    async def recall(self, tenant: str, user: str, query_vector: np.ndarray, k: int,
                     index: VectorIndex) -> list[Recollection]:
        """The user's k facts most relevant to the query: cosine similarity × decayed weight
        (importance halving every half-life), best first."""
        if k <= 0:
            return []
        hits = await index.search(Namespace.of_facts(tenant, user), query_vector, k * 2)
        if not hits:
            return []
        raws = await self.redis.hmget(self._keys(tenant, user).facts, [key for key, _ in hits])
        now = self.clock()
        found = []
        for (field_name, similarity), raw in zip(hits, raws):
            fact = next(iter(self._decoded(tenant, {field_name: raw}).values()), None)
            if fact is None:
                continue  # deleted or aged out since the index was built
            weight = policy.decayed_weight(fact, now, self.policy.half_life_days)
            found.append(Recollection(kind="fact", id=f"fact:{fact.key}",
                                      text=policy.render_fact(fact), source_ids=fact.source_ids,
                                      position=-1, score=float(similarity) * weight))
        found.sort(key=lambda r: (-r.score, r.id))
        return found[:k]
