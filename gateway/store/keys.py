"""Every Redis key the store uses, built in one place.

Invariants:
- every key starts with the key space's prefix (default "gw") and a kind ("c" for a
  conversation's keys), so nothing else in a shared database is touched;
- a conversation's keys are derived from tenant, user *and* conversation id together, each part
  length-prefixed, so no two different (tenant, user, conversation) triples can share a key —
  whatever characters the ids hold (":" is legal in ids, so plain joining could collide);
- the record stream, its group and the dead-letter place are global to the key space: any
  worker of any replica may apply any conversation's job.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from gateway.core.ids import ConversationKey


def _part(value: str) -> str:
    # Length-prefixing makes the encoding injective: "3:a:b" can only be read as the id "a:b".
    return f"{len(value)}:{value}"


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

    def conversation(self, key: ConversationKey) -> ConversationKeys:
        base = (f"{self.prefix}:c:{_part(key.tenant)}:{_part(key.user)}:"
                f"{_part(key.conversation)}")
        return ConversationKeys(
            transcript=f"{base}:transcript",
            branches=f"{base}:branches",
            pending=f"{base}:pending",
            seq=f"{base}:seq",
            applied=f"{base}:applied",
            meta=f"{base}:meta",
            last_enqueued=f"{base}:last",
            archive=f"{base}:archive",
        )

    @property
    def records(self) -> str:
        """Stream of record jobs: {tenant, user, conversation, seq, payload}."""
        return f"{self.prefix}:records"

    @property
    def group(self) -> str:
        """Consumer group of the recorders on `records`."""
        return "recorders"

    @property
    def dead(self) -> str:
        """Stream of jobs that failed `max_attempts` times, kept with their error."""
        return f"{self.prefix}:records:dead"

    @property
    def memory_dirty(self) -> str:
        """Sorted set: conversations whose transcript changed since memory last processed them
        (member: JSON [tenant, user, conversation], score: time of the change). Written in the
        same transaction that applies a turn, so memory work is never lost, only coalesced."""
        return f"{self.prefix}:memory:dirty"

    def conversations_of(self, tenant: str, user: str) -> str:
        """A SCAN pattern matching every conversation key of one user of one tenant."""
        return f"{self.prefix}:c:{_part(tenant)}:{_part(user)}:*"

    def erased(self, tenant: str, user: str) -> str:
        """String: the time (ms, the store's clock) a user's memory was erased — a tombstone
        that keeps turns created before it from being applied, loaded or learned from. Named
        by a hash of (tenant, user): it must not hold the erased user's id in clear text."""
        digest = hashlib.sha256(f"{_part(tenant)}{_part(user)}".encode()).hexdigest()
        return f"{self.prefix}:erased:{digest}"

    @property
    def dead_count(self) -> str:
        """Counter of dead-lettered jobs (never decremented; the stream may be trimmed)."""
        return f"{self.prefix}:records:dead:count"

    def request_log(self, tenant: str) -> str:
        """Stream: the tenant's recent requests (ids and numbers, no message content), capped
        (gateway/request_history.py); read by the console."""
        return f"{self.prefix}:requests:{_part(tenant)}"

    def last_request(self, key: ConversationKey) -> str:
        """String: JSON diagnostics of the conversation's last request (tokens, memory blocks,
        recalled item ids and scores — no content). Under the conversation's key base, so
        erasing the user removes it."""
        return (f"{self.prefix}:c:{_part(key.tenant)}:{_part(key.user)}:"
                f"{_part(key.conversation)}:lastreq")

    def console_session(self, digest: str) -> str:
        """Hash: a console session (its CSRF token, times), named by the sha256 of its id."""
        return f"{self.prefix}:console:session:{digest}"

    def rate_limit(self, tenant: str, scope: str, kind: str) -> str:
        """Hash: unix second -> requests or tokens admitted in it, for one limit of a tenant
        (`scope`: "tenant", or "key:<first 16 hex of the key's sha256>")."""
        return f"{self.prefix}:rl:{_part(tenant)}:{scope}:{kind}"
