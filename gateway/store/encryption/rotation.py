"""Key rotation (`gateway rotate-key --tenant T`): every stored text of a tenant sealed again
with its current key, opened with the current or the previous one (`previous_key_env`).
Texts stored in clear (before encryption was switched on) are sealed too.

Safe while gateways serve: each text is replaced by a compare-and-set script (the element or
field is rewritten only if it still holds what was read), so a concurrent write is never
overwritten — the text it wrote is counted as a conflict and left for the next run. Resumable:
a text already under the current key is skipped; run again until `remaining` is 0. Then the
tenant's key record is sealed with the current key, after which the previous key is no
longer needed (a start with only the old key then fails its key check, loudly).

What it does not rewrite: the record stream's entries (a stream entry cannot be changed in
place); they are applied within seconds, and `queued_under_old_keys` counts those still
there — keep `previous_key_env` until it is 0.

Which keys hold sealed texts, by their kind (the part of the key after the ids):
conversations `transcript`, `archive`, `branches`, `pending`, `m:turns`, `m:chunks`, `m:pins`,
`m:topics`, `responses` (the Responses API's stored responses, but for its `latest` field: an
id); users `facts`, `profile`, `recall`; and the tenant's response owners (`resp:<tenant>:<id>`,
strings). Every other key of a tenant holds ids, counters, settings or vectors.
Facts stored in clear are also renamed: their fields (and their vectors' fields) become the
tenant's keyed names of their fact keys (gateway/memory/records/facts_store.py).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import redis.asyncio as aioredis
from redis.exceptions import WatchError

from gateway.store.disk import DiskRewrites
from gateway.store.encryption.crypto import DecryptError, Encryption, TenantCipher, sealed_key_id
from gateway.store.encryption.keyring import open_record, record_key, seal_record
from gateway.store.keys import KeySpace, _part
from gateway.store.responses import LATEST
from gateway.store.versions import bump_version

SEALED_LISTS = frozenset({"transcript", "archive", "branches", "m:chunks"})
SEALED_HASHES = frozenset({"pending", "m:turns", "m:pins", "m:topics", "facts", "profile",
                           "recall", "responses"})
PLAIN_FIELDS = {"responses": frozenset({LATEST})}
"""Fields of a sealed hash that hold no text (an id) and are never sealed."""
_PAGE = 500
DISK_WAIT_SECONDS = 60.0
"""How long a rotation waits for the store's files to be rewritten (a command run by hand)."""

# KEYS[1]: a list, hash or string. ARGV: "list" | "hash" | "string", index or field (unused
# for a string), the text read, its new text. Rewrites the element only if it still holds the
# text read (a string keeps its time to live): 1 if rewritten, else 0.
_CAS_LUA = """
local now
if ARGV[1] == 'list' then now = redis.call('LINDEX', KEYS[1], ARGV[2])
elseif ARGV[1] == 'hash' then now = redis.call('HGET', KEYS[1], ARGV[2])
else now = redis.call('GET', KEYS[1]) end
if now ~= ARGV[3] then return 0 end
if ARGV[1] == 'list' then redis.call('LSET', KEYS[1], ARGV[2], ARGV[4])
elseif ARGV[1] == 'hash' then redis.call('HSET', KEYS[1], ARGV[2], ARGV[4])
else redis.call('SET', KEYS[1], ARGV[4], 'KEEPTTL') end
return 1
"""


@dataclass
class RotationReport:
    tenant: str
    key_id: str
    keys_scanned: int = 0
    resealed: int = 0
    current: int = 0
    """Texts already under the current key."""
    conflicts: int = 0
    """Texts changed by a concurrent write between the read and the rewrite (run again)."""
    unreadable: int = 0
    """Texts neither key opens (corrupt, or another tenant's): left as they are, logged."""
    queued_under_old_keys: int = 0
    """Record jobs still queued under an older key (the recorder opens them with the previous
    key): keep `previous_key_env` until this is 0."""
    dead_letters_under_old_keys: int = 0
    """Dead-lettered jobs under an older key: kept as they failed; readable only with it."""
    record_resealed: bool = False
    disk: str = "not_needed"
    """The store's append-only file keeps the texts as they were written (in clear, or under
    the old key) until it is rewritten: "rewritten" (by a rewrite started after the re-seal),
    "pending" (still running after DISK_WAIT_SECONDS; resumed by the next gateway to start),
    "not_needed" (no AOF) or "failed: <reason>" (a managed Redis may refuse; its retention
    rules apply). See gateway/store/disk.py."""

    @property
    def remaining(self) -> int:
        return self.conflicts + self.unreadable

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "remaining": self.remaining}


def kind_of(name: str, prefix: str, scope: str) -> str | None:
    """The kind of a key of a tenant (`transcript`, `m:turns`, `facts`...): `name` minus the
    prefix, the scope letter and the length-prefixed ids (three for a conversation, two for a
    user), so no id's content can be mistaken for a kind. None if it does not parse."""
    rest = name.removeprefix(f"{prefix}:{scope}:")
    for _ in range(3 if scope == "c" else 2):
        length, sep, tail = rest.partition(":")
        if not sep or not length.isdigit() or len(tail) < int(length) + 1:
            return None
        rest = tail[int(length) + 1:]
    return rest


async def rotate_tenant(redis: aioredis.Redis, encryption: Encryption, tenant: str,
                        keys: KeySpace | None = None) -> RotationReport:
    """Seal every text of `tenant` with its current key (see the module docstring)."""
    keys = keys or KeySpace()
    cipher = encryption.cipher(tenant)
    if cipher is None:
        raise ValueError(f"tenant {tenant} has no encryption key configured")
    report = RotationReport(tenant, cipher.current.id)
    cas = redis.register_script(_CAS_LUA)
    for scope in ("c", "u"):
        pattern = f"{keys.scan_head()}:{scope}:{_part(tenant)}:*"
        async for name in redis.scan_iter(match=pattern, count=_PAGE):
            kind = kind_of(keys.untagged(name), keys.prefix, scope)
            if kind in SEALED_LISTS:
                report.keys_scanned += 1
                items = await redis.lrange(name, 0, -1)
                for index, text in enumerate(items):
                    await _reseal(cas, cipher, report, name, "list", str(index), text)
            elif kind in SEALED_HASHES:
                report.keys_scanned += 1
                if kind == "facts":
                    await _rename_facts(redis, cipher, report, name)
                plain = PLAIN_FIELDS.get(kind, frozenset())
                async for field, text in redis.hscan_iter(name, count=_PAGE):
                    if field not in plain:
                        await _reseal(cas, cipher, report, name, "hash", field, text)
    async for name in redis.scan_iter(match=f"{keys.prefix}:resp:{_part(tenant)}:*",
                                      count=_PAGE):
        report.keys_scanned += 1
        text = await redis.get(name)
        if text is not None:  # expired since the scan
            await _reseal(cas, cipher, report, name, "string", "", text)
    for shard in keys.shard_ids():  # one record stream per shard of a cluster
        report.queued_under_old_keys += await _under_old_keys(redis, keys.records_at(shard),
                                                              cipher)
        report.dead_letters_under_old_keys += await _under_old_keys(
            redis, keys.dead_at(shard), cipher)
    if report.remaining == 0:
        report.record_resealed = await _reseal_record(redis, keys, cipher)
    if report.resealed or report.record_resealed:
        report.disk = await DiskRewrites.once(redis, keys.disk_rewrite_owed(),
                                              DISK_WAIT_SECONDS)
    return report


async def _reseal(cas: object, cipher: TenantCipher, report: RotationReport, name: str,
                  kind: str, where: str, text: str) -> None:
    if not cipher.stale(text):
        report.current += 1
        return
    try:
        plain = cipher.open(text)
    except DecryptError:
        report.unreadable += 1
        return
    if await cas(keys=[name], args=[kind, where, text, cipher.seal(plain)]):  # type: ignore[operator]
        report.resealed += 1
    else:
        report.conflicts += 1


async def _rename_facts(redis: aioredis.Redis, cipher: TenantCipher, report: RotationReport,
                        facts: str) -> None:
    """Fields of `facts` that are not the keyed name of their fact's key (written in clear)
    moved to it, sealed, with their vectors, in one transaction per field (checked with
    WATCH: a concurrent fact write makes it a conflict, for the next run)."""
    base = facts.removesuffix(":facts")
    vectors, version = f"{base}:fact_vectors", f"{base}:version"
    async for field, text in redis.hscan_iter(facts, count=_PAGE):
        if field.startswith("h:"):
            continue
        try:
            plain = cipher.open(text)
            fact_key = str(json.loads(plain)["key"])
        except (DecryptError, ValueError, KeyError, TypeError):
            report.unreadable += 1
            continue
        async with redis.pipeline(transaction=True) as pipe:
            await pipe.watch(facts, vectors)
            if await pipe.hget(facts, field) != text:
                report.conflicts += 1
                continue
            vector = await pipe.hget(vectors, field)
            pipe.multi()
            pipe.hset(facts, cipher.name(fact_key), cipher.seal(plain))
            pipe.hdel(facts, field)
            if vector is not None:
                pipe.hset(vectors, cipher.name(fact_key), vector)
                pipe.hdel(vectors, field)
            bump_version(pipe, version)
            try:
                await pipe.execute()
            except WatchError:
                report.conflicts += 1
                continue
        report.resealed += 1


async def _under_old_keys(redis: aioredis.Redis, stream: str, cipher: TenantCipher) -> int:
    count, cursor = 0, "-"
    while True:
        page = await redis.xrange(stream, cursor, "+", count=_PAGE)
        count += sum(1 for _, f in page if f.get("tenant") == cipher.tenant
                     and sealed_key_id(f.get("payload", "")) not in (None, cipher.current.id))
        if len(page) < _PAGE:
            return count
        cursor = "(" + page[-1][0]


async def _reseal_record(redis: aioredis.Redis, keys: KeySpace, cipher: TenantCipher) -> bool:
    """The key record under the current key (compare-and-set on the string)."""
    name = record_key(keys, cipher.tenant)
    raw = await redis.get(name)
    if raw is None or not cipher.stale(raw):
        return False
    if open_record(cipher, raw) != cipher.index_key:
        raise DecryptError(f"tenant {cipher.tenant}: the key record changed under rotation")
    async with redis.pipeline(transaction=True) as pipe:
        await pipe.watch(name)
        if await pipe.get(name) != raw:
            return False
        pipe.multi()
        pipe.set(name, seal_record(cipher))
        await pipe.execute()
    return True
