"""The tenants' keys at start-up: read from the environment, checked against the store.

Per encrypted tenant the store keeps one record, `<prefix>:crypto:<tenant>` (a string): the
tenant's index key (32 random bytes, made once, never rotated; it keys the HMACs that name
fact keys and deduplicate retried enqueues) sealed with the tenant's data key. Opening it is
the key check: a wrong key fails here, at start-up, naming the config key to fix — never
later with garbage. `gateway rotate-key` seals it again with the new key once every text is.

Invariants:
- `load_encryption` returns ciphers only for tenants configured with a key, each holding the
  index key from the store (the first process to start makes it: SET NX, so concurrent
  starts agree on one);
- a tenant whose record exists but has no key configured fails the start too (its texts
  could not be read) — checked whenever any tenant has a key;
- without any key configured nothing is read (no round trip, the start-up of before: the
  gateway starts and serves with the store down). With a key, the store must answer.
"""

from __future__ import annotations

import base64
import json
import os

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.config import Config
from gateway.config.strict import KEY_BYTES
from gateway.errors import ConfigError
from gateway.store.encryption.crypto import (
    DataKey,
    DecryptError,
    Encryption,
    TenantCipher,
    sealed_key_id,
)
from gateway.store.cluster import is_cluster
from gateway.store.keys import KeySpace, _part


def record_key(keys: KeySpace, tenant: str) -> str:
    """String: the tenant's index key, sealed with its data key (see the module docstring)."""
    return f"{keys.prefix}:crypto:{_part(tenant)}"


def seal_record(cipher: TenantCipher) -> str:
    return cipher.seal(json.dumps({"v": 1, "index_key":
                                   base64.b64encode(cipher.index_key).decode()}))


def open_record(cipher: TenantCipher, raw: str) -> bytes:
    data = json.loads(cipher.open(raw))
    key = base64.b64decode(data["index_key"])
    if len(key) != KEY_BYTES:
        raise ValueError("index key of the wrong size")
    return key


async def load_encryption(config: Config, redis: aioredis.Redis,
                          keys: KeySpace | None = None) -> Encryption:
    """Every tenant's cipher, checked against the store; ConfigError naming the key to fix."""
    keys = keys or KeySpace()
    configured = {name: config.encryption_for(name) for name in config.tenants}
    if not any(configured.values()):
        return Encryption()  # off: free, and the store may come later
    names = sorted(config.tenants)
    try:
        wanted = [record_key(keys, n) for n in names]
        # Tenants' records are in different slots of a cluster: one read per slot there.
        read = redis.mget_nonatomic if is_cluster(redis) else redis.mget  # type: ignore[attr-defined]
        records = dict(zip(names, await read(wanted)))
    except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
        raise ConfigError(f"encryption: the store must answer at start-up to check the "
                          f"keys, and it did not ({exc!r})") from None
    ciphers = {}
    for name in names:
        raw, setting = records[name], configured[name]
        if setting is None:
            if raw is not None:
                raise ConfigError(
                    f"tenants.{name}.encryption: the store holds this tenant's texts "
                    f"encrypted (key {sealed_key_id(raw)}), but no key is configured for it "
                    "(set tenants.<name>.encryption.key_env or the top-level encryption)")
            continue
        encryption, where = setting
        current, previous = encryption.keys(where)
        cipher = TenantCipher(name, DataKey(current),
                              DataKey(previous) if previous is not None else None)
        if raw is None:
            made = seal_record(_with_index(cipher, os.urandom(KEY_BYTES)))
            if not await redis.set(record_key(keys, name), made, nx=True):
                raw = await redis.get(record_key(keys, name))  # another process was first
            else:
                raw = made
        try:
            if sealed_key_id(raw or "") is None:  # never trust an index key stored in clear
                raise ValueError("not sealed")
            index_key = open_record(cipher, raw or "")
        except DecryptError:
            env = encryption.key_env + (f" (or {encryption.previous_key_env})"
                                        if encryption.previous_key_env else "")
            raise ConfigError(
                f"{where}.key_env: the key in {env} does not open tenant {name}'s data in "
                f"the store (sealed with key {sealed_key_id(raw or '')}; this key is "
                f"{cipher.current.id}). Wrong key? During a rotation, name the old key in "
                f"{where}.previous_key_env") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{where}: the store's key record of tenant {name} "
                              f"({record_key(keys, name)}) is corrupt ({exc})") from None
        ciphers[name] = _with_index(cipher, index_key)
    return Encryption(ciphers)


def _with_index(cipher: TenantCipher, index_key: bytes) -> TenantCipher:
    return TenantCipher(cipher.tenant, cipher.current, cipher.previous, index_key)
