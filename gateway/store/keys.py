"""Every Redis key the store uses, built in one place.

Invariants:
- every key starts with the key space's prefix (default "gw") and a kind ("c" for a
  conversation's keys), so nothing else in a shared database is touched;
- a conversation's keys are derived from tenant, user *and* conversation id together, each part
  length-prefixed, so no two different (tenant, user, conversation) triples can share a key —
  whatever characters the ids hold (":" is legal in ids, so plain joining could collide);
- the record stream, its group and the dead-letter place are global to the key space (one
  of each per shard in a cluster): any worker of any replica may apply any conversation's job.

Redis Cluster (`shards` >= 1; docs/cluster.md): every key of one user of one tenant
(its conversations' keys, its memory keys, its erase tombstone) carries the hash tag of the
user's shard, `<prefix>:{<tag>}:...`, and so do the queues a script or transaction writes
together with them (the record stream, its dead letters, the memory queue): every multi-key
operation stays in one slot. The tag of shard i is chosen to hash into the i-th of `shards`
equal slot ranges, so shards spread evenly over the masters of an evenly sliced cluster.
With `shards` 0 (one Redis, the default) no key carries a tag: the names are those of every
release before, so existing stores need no migration.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from gateway.core.ids import ConversationKey

MAX_SHARDS = 256
"""More shards spread load finer but cost a blocking stream read per recorder per shard."""


def _part(value: str) -> str:
    # Length-prefixing makes the encoding injective: "3:a:b" can only be read as the id "a:b".
    return f"{len(value)}:{value}"


def shard_tag(shard: int, shards: int) -> str:
    """The hash tag of `shard` of `shards`: the first "s<shard>.<n>" whose slot falls in the
    shard's equal share of the 16384 slots. Deterministic, so every process and release
    agrees; changing `shards` renames every key (docs/cluster.md: there is no migration)."""
    low = shard * REDIS_CLUSTER_HASH_SLOTS // shards
    high = (shard + 1) * REDIS_CLUSTER_HASH_SLOTS // shards
    n = 0
    while not low <= key_slot(f"s{shard}.{n}".encode()) < high:
        n += 1
    return f"s{shard}.{n}"


@dataclass(frozen=True, slots=True)
class ConversationKeys:
    """The keys of one conversation (one user of one tenant)."""

    transcript: str
    """List: the active branch, one JSON StoredMessage per element, oldest first."""
    branches: str
    """List: archived branches, one JSON {archived_at, messages} per element, oldest first."""
    pending: str
    """Hash: seq -> JSON TurnRecord, enqueued and not yet applied (read-your-writes)."""
    seq: str
    """String counter: the seq of the last turn enqueued (INCR)."""
    applied: str
    """String: the seq of the last turn applied (or dead-lettered); turns apply in seq order."""
    meta: str
    """Hash: tenant, user, conversation, created_at, updated_at, message_count."""
    last_enqueued: str
    """String: "<sha1 of the payload> <stream entry id>" of the turn enqueued last, so the retry
    of an enqueue whose reply was lost (the store failed mid-command) is not enqueued twice."""
    deleted: str
    """String: the time (ms, the store's clock) the conversation was deleted — its tombstone,
    like the user's (`KeySpace.erased`): turns created before it are never enqueued, shown,
    applied or learned from again. Named by a hash of (tenant, user, conversation): the one
    record of a deleted conversation, holding no id in clear text and no content."""
    archive: str
    """List: the oldest messages of the active branch, moved out of `transcript` once the
    conversation passed its cap (gateway/store/archive.py), one JSON StoredMessage per element,
    oldest first: archive + transcript is the whole branch. Its length is the transcript's
    offset (the conversation position of the transcript's first element)."""

    def all(self) -> tuple[str, ...]:
        return (self.transcript, self.branches, self.pending, self.seq, self.applied, self.meta,
                self.last_enqueued, self.archive)


@dataclass(frozen=True, slots=True)
class KeySpace:
    """Names of all keys under one prefix. Tests and deployments sharing a database may pick
    another prefix; the default is the one the gateway uses."""

    prefix: str = "gw"
    shards: int = 0
    """0: one Redis, no hash tags; n >= 1: Redis Cluster with n shards (module docstring)."""
    _tags: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not 0 <= self.shards <= MAX_SHARDS:
            raise ValueError(f"shards must be between 0 and {MAX_SHARDS}")
        if self.shards and ("{" in self.prefix or "}" in self.prefix):
            raise ValueError("a cluster key space's prefix must not hold { or }: the first "
                             "{...} of a key is its hash tag")
        object.__setattr__(self, "_tags", tuple(shard_tag(i, self.shards)
                                                for i in range(self.shards)))

    # -- sharding ------------------------------------------------------------------------------

    @property
    def cluster(self) -> bool:
        return self.shards > 0

    def shard_ids(self) -> range:
        """Every shard (one, numbered 0, without a cluster)."""
        return range(max(1, self.shards))

    def shard_of(self, tenant: str, user: str) -> int:
        """The shard of every key of one user of one tenant (0 without a cluster)."""
        if not self.shards:
            return 0
        digest = hashlib.blake2b(f"{_part(tenant)}{_part(user)}".encode(), digest_size=8)
        return int.from_bytes(digest.digest(), "big") % self.shards

    def head(self, shard: int) -> str:
        """What the keys of `shard` start with: the prefix, and in a cluster the shard's tag."""
        return f"{self.prefix}:{{{self._tags[shard]}}}" if self.shards else self.prefix

    def user_head(self, tenant: str, user: str) -> str:
        return self.head(self.shard_of(tenant, user))

    def scan_head(self) -> str:
        """The head of every shard as a SCAN pattern (a cluster's tag matched by a wildcard),
        for patterns over many users (`<scan_head>:c:<tenant>:*`). The wildcard may match
        more than a tag: callers check each name found (`untagged`, then parse it)."""
        return f"{self.prefix}:{{*}}" if self.shards else self.prefix

    def untagged(self, name: str) -> str:
        """`name` without a cluster's shard tag (as the key would be named without a cluster),
        so one parser reads names of both; unchanged without a cluster, or if it has no tag
        of this key space."""
        if not self.shards:
            return name
        head = f"{self.prefix}:{{"
        tag, sep, rest = name.removeprefix(head).partition("}:")
        if not name.startswith(head) or not sep or tag not in self._tags:
            return name
        return f"{self.prefix}:{rest}"

    # -- per-shard queues (one of each without a cluster, under the names they always had) --

    def records_at(self, shard: int) -> str:
        """Stream of record jobs of the users of `shard`: {tenant, user, conversation, seq,
        payload}."""
        return f"{self.head(shard)}:records"

    def dead_at(self, shard: int) -> str:
        """Stream of `shard`'s jobs that failed `max_attempts` times, kept with their error."""
        return f"{self.head(shard)}:records:dead"

    def dead_count_at(self, shard: int) -> str:
        """Counter of `shard`'s dead-lettered jobs (never decremented)."""
        return f"{self.head(shard)}:records:dead:count"

    def memory_dirty_at(self, shard: int) -> str:
        """Sorted set: conversations of `shard` whose transcript changed since memory last
        processed them (member: JSON [tenant, user, conversation], score: time of the change).
        Written in the same transaction that applies a turn, so memory work is never lost,
        only coalesced."""
        return f"{self.head(shard)}:memory:dirty"

    def memory_dead_at(self, shard: int) -> str:
        """Hash: member of `memory_dirty_at(shard)` -> the error that dead-lettered it."""
        return f"{self.head(shard)}:memory:dead"

    def memory_dirty_of(self, key: ConversationKey) -> str:
        return self.memory_dirty_at(self.shard_of(key.tenant, key.user))

    def _single(self, name: str, shard_key: str) -> str:
        if self.shards:
            # A caller that does not know the shard would touch the wrong slot: say so loudly.
            raise RuntimeError(f"KeySpace.{name} is per shard in a cluster: use {name}_at()")
        return shard_key

    # -- keys -----------------------------------------------------------------------------------

    def conversation(self, key: ConversationKey) -> ConversationKeys:
        base = (f"{self.user_head(key.tenant, key.user)}:c:{_part(key.tenant)}:"
                f"{_part(key.user)}:{_part(key.conversation)}")
        return ConversationKeys(
            transcript=f"{base}:transcript",
            branches=f"{base}:branches",
            pending=f"{base}:pending",
            seq=f"{base}:seq",
            applied=f"{base}:applied",
            meta=f"{base}:meta",
            last_enqueued=f"{base}:last",
            deleted=f"{self.user_head(key.tenant, key.user)}:deleted:" + hashlib.sha256(
                f"{_part(key.tenant)}{_part(key.user)}{_part(key.conversation)}".encode()
            ).hexdigest(),
            archive=f"{base}:archive",
        )

    @property
    def records(self) -> str:
        """The record stream (one Redis only; see `records_at`)."""
        return self._single("records", self.records_at(0))

    @property
    def group(self) -> str:
        """Consumer group of the recorders on `records`."""
        return "recorders"

    @property
    def dead(self) -> str:
        """The dead-letter stream (one Redis only; see `dead_at`)."""
        return self._single("dead", self.dead_at(0))

    @property
    def memory_dirty(self) -> str:
        """The memory queue (one Redis only; see `memory_dirty_at`)."""
        return self._single("memory_dirty", self.memory_dirty_at(0))

    def conversations_of(self, tenant: str, user: str) -> str:
        """A SCAN pattern matching every conversation key of one user of one tenant."""
        return f"{self.user_head(tenant, user)}:c:{_part(tenant)}:{_part(user)}:*"

    def erased(self, tenant: str, user: str) -> str:
        """String: the time (ms, the store's clock) a user's memory was erased — a tombstone
        that keeps turns created before it from being applied, loaded or learned from. Named
        by a hash of (tenant, user): it must not hold the erased user's id in clear text."""
        digest = hashlib.sha256(f"{_part(tenant)}{_part(user)}".encode()).hexdigest()
        return f"{self.user_head(tenant, user)}:erased:{digest}"

    @property
    def dead_count(self) -> str:
        """The dead-letter counter (one Redis only; see `dead_count_at`)."""
        return self._single("dead_count", self.dead_count_at(0))

    def request_log(self, tenant: str) -> str:
        """Stream: the tenant's recent requests (ids and numbers, no message content), capped
        (gateway/pipeline/request_history.py); read by the console."""
        return f"{self.prefix}:requests:{_part(tenant)}"

    def last_request(self, key: ConversationKey) -> str:
        """String: JSON diagnostics of the conversation's last request (tokens, memory blocks,
        recalled item ids and scores — no content). Under the conversation's key base, so
        erasing the user removes it."""
        return (f"{self.user_head(key.tenant, key.user)}:c:{_part(key.tenant)}:"
                f"{_part(key.user)}:{_part(key.conversation)}:lastreq")

    def conversation_usage(self, key: ConversationKey) -> str:
        """Hash: the conversation's usage counters (gateway/store/recording/usage.py). Under
        the conversation's key base: deleting it or erasing the user removes it."""
        return (f"{self.user_head(key.tenant, key.user)}:c:{_part(key.tenant)}:"
                f"{_part(key.user)}:{_part(key.conversation)}:usage")

    def user_usage(self, tenant: str, user: str) -> str:
        """Hash: the user's usage counters, over all their conversations. Among the user's
        memory keys (`:u:`), so erasing the user removes it."""
        return f"{self.user_head(tenant, user)}:u:{_part(tenant)}:{_part(user)}:usage"

    def tenant_usage_at(self, shard: int, tenant: str) -> str:
        """Hash: the usage counters of the tenant's users of `shard` (one per shard, so the
        recorder adds to it in the transaction that applies a turn; the tenant's figures are
        the sum over shards). Numbers only: no user's id."""
        return f"{self.head(shard)}:usage:{_part(tenant)}"

    def disk_rewrite_owed(self) -> str:
        """String: set while a rewrite of the store's files is owed after a delete (a token,
        no content); a process that starts and finds it rewrites (gateway/store/disk.py)."""
        return f"{self.prefix}:disk:rewrite_owed"

    def responses(self, key: ConversationKey) -> str:
        """Hash: response id -> JSON of a Responses API `response` of the conversation (sealed
        when the tenant encrypts), and `latest` -> the id of its newest. Under the
        conversation's key base, so deleting the conversation or erasing the user removes it."""
        return (f"{self.user_head(key.tenant, key.user)}:c:{_part(key.tenant)}:"
                f"{_part(key.user)}:{_part(key.conversation)}:responses")

    def response_owner(self, tenant: str, response_id: str) -> str:
        """String: JSON [user, conversation] of a stored response (sealed when the tenant
        encrypts) — how `previous_response_id` finds its conversation. No content."""
        return f"{self.prefix}:resp:{_part(tenant)}:{_part(response_id)}"

    def console_session(self, digest: str) -> str:
        """Hash: a console session (its CSRF token, times), named by the sha256 of its id."""
        return f"{self.prefix}:console:session:{digest}"

    def rate_limit(self, tenant: str, scope: str, kind: str) -> str:
        """Hash: unix second -> requests or tokens admitted in it, for one limit of a tenant
        (`scope`: "tenant", or "key:<first 16 hex of the key's sha256>"). In a cluster the
        tenant part is the hash tag: one admission checks a tenant's limits in one script."""
        tenant_part = f"{{{_part(tenant)}}}" if self.shards else _part(tenant)
        return f"{self.prefix}:rl:{tenant_part}:{scope}:{kind}"
