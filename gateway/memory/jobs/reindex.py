"""Re-embedding a tenant's stored memory with the configured embedder (`gateway reindex`).

After `memory.embedder` changes, the store holds vectors of the old embedder's space. The
index never searches them (gateway/memory/records/vector_store.py, vector_index.py): their items are
recalled lexically only. A re-index replaces them, namespace by namespace:

- conversation namespaces: each turn is embedded again as the turn indexer embeds it (its
  text after the previous turn's, from the transcript), each summary chunk from its text;
- fact namespaces: each fact from its text;
- user recall namespaces: each item's vector is copied from its conversation's, re-embedded
  first (as the memory worker mirrors them).

Safe while gateways and memory workers run: a vector is replaced only if it still holds the
value read (one script checks and sets, and bumps the namespace's version, so every cached
index refreshes) — a vector the worker wrote or deleted meanwhile is left as it is. Resumable:
vectors already in the configured space are skipped, so a second run does only what is left.
Progress per tenant is kept in the store (`status`): namespaces done / total, vectors
re-embedded, and the state; one run per tenant at a time (a lock key, renewed as it goes).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import AsyncIterator, Callable, Iterable, Sequence

import redis.asyncio as aioredis

from gateway.core.memory import facts as fact_policy
from gateway.core.ids import ConversationKey
from gateway.memory.records.chunk_store import VECTOR_PREFIX, ChunkStore, vector_id
from gateway.memory.search.embedding import EmbeddingService
from gateway.memory.records.facts_store import FactStore
from gateway.memory.records.keys import MemoryKeySpace
from gateway.memory.jobs.turn_index import TurnIndexer, turn_entries
from gateway.memory.records.user_recall import split_id
from gateway.memory.records.vector_store import encode_vector, vector_space
from gateway.store.encryption.crypto import NO_ENCRYPTION, Encryption
from gateway.store.keys import _part

BATCH = 64
LOCK_SECONDS = 300

# Replace vectors only where they still hold what was read; bump the version if any changed.
# KEYS[1] vectors hash, KEYS[2] version; ARGV: field, expected, new, field, expected, new...
_SWAP = """
local changed = 0
for i = 1, #ARGV, 3 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 2])
    changed = changed + 1
  end
end
-- a vector changed, so the counter exists (started at random by gateway/store/versions.py)
if changed > 0 then redis.call('INCR', KEYS[2]) end
return changed
"""


class ReindexRunning(RuntimeError):
    """Another re-index of the tenant holds its lock."""


@dataclass(slots=True)
class ReindexStatus:
    tenant: str
    embedder: str
    """The embedder the run re-embeds with (name)."""
    space: str
    state: str = "running"
    """running | done | failed | interrupted (a failed or interrupted run is resumed by
    running again)."""
    namespaces_total: int = 0
    namespaces_done: int = 0
    reembedded: int = 0
    """Vectors replaced by vectors of `space`."""
    left: int = 0
    """Vectors of another space left as they were: their item is gone from the transcript
    (the memory worker removes it) or changed meanwhile."""
    started_at: float = 0.0
    updated_at: float = 0.0
    error: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def parse(cls, raw: str | None) -> ReindexStatus | None:
        if not raw:
            return None
        try:
            return cls(**json.loads(raw))
        except (ValueError, TypeError):
            return None


def _glob(text: str) -> str:
    """`text` matched literally in a SCAN pattern."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)


def _parts(text: str, count: int) -> tuple[list[str], str] | None:
    """`count` length-prefixed parts ("3:abc:") read off the start of `text`, and the rest."""
    parts = []
    for _ in range(count):
        length, sep, rest = text.partition(":")
        if not sep or not length.isdigit() or len(rest) < int(length):
            return None
        parts.append(rest[:int(length)])
        text = rest[int(length):]
        if text.startswith(":"):
            text = text[1:]
    return parts, text


class Reindexer:
    def __init__(self, redis: aioredis.Redis, embedding: EmbeddingService,
                 keys: MemoryKeySpace = MemoryKeySpace(), *, context: bool = True,
                 clock: Callable[[], float] = time.time,
                 encryption: Encryption = NO_ENCRYPTION):
        """`context`: embed turns after the turn before them, as `memory.index.
        context_vectors` says (the turn indexer's setting); `encryption`: opens the stored
        texts (and names fact fields) as the stores do."""
        self.redis = redis
        self.embedding = embedding
        self.keys = keys
        self.context = context
        self.clock = clock
        self.space = embedding.space
        self._swap = redis.register_script(_SWAP)
        # The stores' own readers (transcript, chunks, facts): they decode what they wrote.
        self.encryption = encryption
        self._turns = TurnIndexer(redis, embedding, keys, encryption=encryption)
        self._chunks = ChunkStore(redis, keys, encryption=encryption)
        self._facts_store = FactStore(redis, keys, embedding.embed, space=self.space,
                                      encryption=encryption)

    def status_key(self, tenant: str) -> str:
        return f"{self.keys.store.prefix}:reindex:{_part(tenant)}"

    async def status(self, tenant: str) -> ReindexStatus | None:
        """The tenant's last run as stored; a "running" run whose lock has expired (its
        process died) reads as "interrupted" (run again to resume)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(self.status_key(tenant))
            pipe.exists(self.status_key(tenant) + ":lock")
            raw, locked = await pipe.execute()
        status = ReindexStatus.parse(raw)
        if status is not None and status.state == "running" and not locked:
            status.state = "interrupted"
        return status

    async def run(self, tenant: str,
                  progress: Callable[[ReindexStatus], object] | None = None) -> ReindexStatus:
        """Re-embed every vector of `tenant` not in the configured space. Raises
        ReindexRunning if another run of the tenant holds the lock."""
        lock = self.status_key(tenant) + ":lock"
        if not await self.redis.set(lock, self.space, nx=True, ex=LOCK_SECONDS):
            raise ReindexRunning(f"a re-index of tenant {tenant!r} is running already")
        now = self.clock()
        status = ReindexStatus(tenant, self.embedding.embedder.name, self.space,
                               started_at=now, updated_at=now)
        try:
            conversations = [k async for k in self._conversations(tenant)]
            users = sorted({u async for u in self._users(tenant)})
            status.namespaces_total = len(conversations) + 2 * len(users)
            await self._save(status, lock, progress)
            for key in conversations:
                await self._counted(status, await self._conversation(key))
                await self._save(status, lock, progress)
            for user in users:
                await self._counted(status, await self._facts(tenant, user))
                await self._save(status, lock, progress)
                await self._counted(status, await self._user_recall(tenant, user))
                await self._save(status, lock, progress)
            status.state = "done"
        except BaseException as exc:
            status.state, status.error = "failed", f"{type(exc).__name__}: {exc}"
            raise
        finally:
            status.updated_at = self.clock()
            await self.redis.set(self.status_key(tenant), status.to_json())
            await self.redis.delete(lock)
        return status

    async def _counted(self, status: ReindexStatus, result: tuple[int, int]) -> None:
        status.namespaces_done += 1
        status.reembedded += result[0]
        status.left += result[1]

    async def _save(self, status: ReindexStatus, lock: str,
                    progress: Callable[[ReindexStatus], object] | None) -> None:
        status.updated_at = self.clock()
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(self.status_key(status.tenant), status.to_json())
            pipe.expire(lock, LOCK_SECONDS)
            await pipe.execute()
        if progress is not None:
            progress(status)

    async def _conversations(self, tenant: str) -> AsyncIterator[ConversationKey]:
        store = self.keys.store
        prefix = f"{store.prefix}:c:"
        pattern = f"{store.scan_head()}:c:{_glob(_part(tenant))}:*:m:vectors"
        async for raw in self.redis.scan_iter(match=pattern, count=500):
            parsed = _parts(store.untagged(raw)[len(prefix):], 3)
            if parsed is None or parsed[1] != "m:vectors" or parsed[0][0] != tenant:
                continue
            key = ConversationKey(*parsed[0])
            if self.keys.conversation(key).vectors == raw:
                yield key

    async def _users(self, tenant: str) -> AsyncIterator[str]:
        store = self.keys.store
        prefix = f"{store.prefix}:u:"
        pattern = f"{store.scan_head()}:u:{_glob(_part(tenant))}:*"
        async for raw in self.redis.scan_iter(match=pattern, count=500):
            untagged = store.untagged(raw)
            if not untagged.startswith(prefix):
                continue
            parsed = _parts(untagged[len(prefix):], 2)
            if parsed is None or parsed[0][0] != tenant:
                continue
            if parsed[1] in ("fact_vectors", "recall_vectors"):
                yield parsed[0][1]

    def _foreign(self, stored: dict[str, str]) -> dict[str, str]:
        return {i: v for i, v in stored.items() if vector_space(v) != self.space}

    async def _conversation(self, key: ConversationKey) -> tuple[int, int]:
        k = self.keys.conversation(key)
        foreign = self._foreign(await self.redis.hgetall(k.vectors))
        if not foreign:
            return 0, 0
        texts: dict[str, str] = {}
        if any(not i.startswith(VECTOR_PREFIX) for i in foreign):
            transcript = await self._turns.load_transcript(key)
            texts.update({e.id: e.embed_text
                          for e in turn_entries(transcript, context=self.context)
                          if e.id in foreign})
        if any(i.startswith(VECTOR_PREFIX) for i in foreign):
            # Through the chunk store: it reads chunks as stored (sealed ones included).
            for chunk in await self._chunks.list(key):
                cid = vector_id(chunk.id)
                if cid in foreign and chunk.text.strip():
                    texts[cid] = chunk.text
        done = await self._replace(k.vectors, k.version, foreign, texts)
        return done, len(foreign) - done

    async def _facts(self, tenant: str, user: str) -> tuple[int, int]:
        u = self.keys.user(tenant, user)
        foreign = self._foreign(await self.redis.hgetall(u.fact_vectors))
        if not foreign:
            return 0, 0
        # Through the fact store: it reads facts as stored; a vector's field is its fact's key
        # (keyed by the tenant's index key when encrypted: Encryption.name).
        # A fact gone or unreadable keeps its vector: the fact store's own clean-up.
        texts = {}
        for fact in await self._facts_store.list(tenant, user):
            field = self.encryption.name(tenant, fact.key)
            if field in foreign:
                texts[field] = fact_policy.fact_text(fact)
        done = await self._replace(u.fact_vectors, u.version, foreign, texts)
        return done, len(foreign) - done

    async def _user_recall(self, tenant: str, user: str) -> tuple[int, int]:
        u = self.keys.user(tenant, user)
        foreign = self._foreign(await self.redis.hgetall(u.recall_vectors))
        if not foreign:
            return 0, 0
        by_conversation: dict[str, list[str]] = {}
        for qid in foreign:
            by_conversation.setdefault(split_id(qid)[0], []).append(qid)
        args: list[str] = []
        for conversation, qids in sorted(by_conversation.items()):
            source = self.keys.conversation(ConversationKey(tenant, user, conversation)).vectors
            copies = await self.redis.hmget(source, [split_id(q)[1] for q in qids])
            for qid, copy in zip(qids, copies):
                if copy is not None and vector_space(copy) == self.space:
                    args += [qid, foreign[qid], copy]
        done = 0
        for start in range(0, len(args), 3 * 512):
            done += int(await self._swap(keys=[u.recall_vectors, u.recall_version],
                                         args=args[start:start + 3 * 512]))
        return done, len(foreign) - done

    async def _replace(self, vectors: str, version: str, foreign: dict[str, str],
                       texts: dict[str, str]) -> int:
        """Embed `texts` (item id -> text) and swap each one's vector in, where the store
        still holds `foreign[id]`. Returns how many were swapped."""
        ids = sorted(texts)
        done = 0
        for batch in _batches(ids, BATCH):
            matrix = await self.embedding.embed([texts[i] for i in batch])
            args = [a for i, v in zip(batch, matrix)
                    for a in (i, foreign[i], encode_vector(v, self.space))]
            done += int(await self._swap(keys=[vectors, version], args=args))
        return done


def _batches(items: Sequence[str], size: int) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def embedder_key(keys: MemoryKeySpace) -> str:
    """String: JSON {name, dim, space} of the embedder the gateway last started with."""
    return f"{keys.store.prefix}:embedder"


async def note_embedder(redis: aioredis.Redis, keys: MemoryKeySpace,
                        embedding: EmbeddingService) -> str | None:
    """Record the embedder this gateway starts with; returns the previous one's name when it
    was another (logged by the caller: its vectors are not searched until a re-index)."""
    e = embedding.embedder
    current = json.dumps({"name": e.name, "dim": e.dim, "space": embedding.space})
    previous = await redis.set(embedder_key(keys), current, get=True)
    if previous is None or previous == current:
        return None
    try:
        return str(json.loads(previous).get("name"))
    except (ValueError, AttributeError):
        return "unknown"


def _line(status: ReindexStatus) -> str:
    return (f"tenant {status.tenant}: {status.state}, {status.namespaces_done}/"
            f"{status.namespaces_total} namespaces, {status.reembedded} vectors re-embedded "
            f"with {status.embedder}" + (f", {status.left} left" if status.left else "")
            + (f" ({status.error})" if status.error else ""))


async def reindex_command(embedding: EmbeddingService, redis: aioredis.Redis,
                          tenants: Sequence[str], *, context: bool, status_only: bool,
                          write: Callable[[str], object],
                          encryption: Encryption = NO_ENCRYPTION,
                          keys: MemoryKeySpace | None = None) -> int:
    """`gateway reindex`: re-index `tenants` (or, `status_only`, print their status); the exit
    status (0 done, 1 a run failed or is running elsewhere). `keys`: the store's (a cluster's
    are tagged)."""
    keys = keys or MemoryKeySpace()
    reindexer = Reindexer(redis, embedding, keys, context=context, encryption=encryption)
    stored = await redis.get(embedder_key(keys))
    if stored is not None and json.loads(stored).get("space") != reindexer.space:
        write(f"note: the gateway last started with {json.loads(stored).get('name')}, this "
              f"config embeds with {embedding.embedder.name}: the gateway searches only its "
              "own embedder's vectors")
    if status_only:
        for tenant in tenants:
            status = await reindexer.status(tenant)
            write(_line(status) if status else f"tenant {tenant}: never re-indexed")
        return 0
    failed = 0
    last = [0.0]

    def progress(status: ReindexStatus) -> None:
        if time.monotonic() - last[0] >= 2 or status.namespaces_done == status.namespaces_total:
            last[0] = time.monotonic()
            write(_line(status))

    for tenant in tenants:
        try:
            write(_line(await reindexer.run(tenant, progress)))
        except ReindexRunning as exc:
            write(str(exc))
            failed += 1
    return 1 if failed else 0
