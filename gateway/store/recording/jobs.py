"""A record job as the recorder reads it from the record stream (`gw:records`).

An entry carries tenant, user, conversation, seq and the encoded turn (`payload`); this
module parses entries (a malformed one raises `MalformedEntry`, and is dead-lettered by the
recorder), tells a job its user's erase predates, and keeps what one process knows about an
entry it holds (attempts, backoff, how long it has waited for a missing seq).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.core.ids import ConversationKey
from gateway.store.codec import CodecError, decode_record
from gateway.store.encryption.crypto import DecryptError, Encryption
from gateway.store.redis_store import entry_ms, erased_before


class MalformedEntry(ValueError):
    """A stream entry without the fields every job has."""


@dataclass(frozen=True, slots=True)
class Job:
    entry_id: str
    key: ConversationKey
    seq: int
    payload: str


@dataclass(slots=True)
class EntryState:
    """What this process knows about one entry in a consumer's pending list."""

    attempts: int = 0
    retry_at: float = 0.0        # monotonic time before which a failed job is not retried
    gap_since: float | None = None


def parse_entry(entry_id: str, fields: dict[str, str]) -> Job:
    try:
        key = ConversationKey(fields["tenant"], fields["user"], fields["conversation"])
        return Job(entry_id, key, int(fields["seq"]), fields["payload"])
    except (KeyError, TypeError, ValueError) as exc:
        raise MalformedEntry(f"stream entry {entry_id} is malformed: {exc!r}") from exc


def predates_erase(tombstone: str | None, job: Job, encryption: Encryption) -> bool:
    """Enqueued (stream time) before, or created (the turn's own time) at or before, its
    user's erase or its conversation's delete. Enqueued in the very millisecond of the
    tombstone says nothing (before or after it?): the turn's own, finer time decides."""
    if tombstone is None:
        return False
    if entry_ms(job.entry_id) < int(tombstone):
        return True
    try:
        return erased_before(tombstone, decode_record(
            encryption.open(job.key.tenant, job.payload)).created_at)
    except (CodecError, DecryptError):  # the job itself then fails, and is dead-lettered
        return False


def stream_entries(reply: Any) -> list[tuple[str, dict[str, str] | None]]:
    """Entries of an XREADGROUP reply for our one stream (RESP2 list or RESP3 dict)."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return [e for batch in reply.values() for e in (batch[0] if batch else [])]
    return [e for _stream, batch in reply for e in batch]
