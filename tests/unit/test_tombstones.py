"""Which recorded turns a tombstone (a user's erase, a conversation's delete) drops
(gateway/store/recording/jobs.py `predates_erase`): by the store time of its enqueue, and by
its own time when it was enqueued in the tombstone's very millisecond."""

from __future__ import annotations

from gateway.core.ids import ConversationKey
from gateway.core.messages import Message
from gateway.core.transcript import TurnRecord
from gateway.store.codec import encode_record
from gateway.store.encryption.crypto import NO_ENCRYPTION
from gateway.store.recording.jobs import Job, predates_erase

TOMBSTONE_MS = 1_795_000_000_123
KEY = ConversationKey("acme", "erin", "c")


def job(entry_ms: int, created_at: float) -> Job:
    record = TurnRecord("append", None, (Message.of("user", "hi"),), created_at=created_at)
    return Job(f"{entry_ms}-0", KEY, 1, encode_record(record))


def test_a_turn_enqueued_before_the_tombstone_is_dropped_whatever_its_own_time():
    assert predates_erase(str(TOMBSTONE_MS), job(TOMBSTONE_MS - 1, 1e12), NO_ENCRYPTION)


def test_a_turn_enqueued_after_it_but_created_before_it_is_dropped():
    assert predates_erase(str(TOMBSTONE_MS), job(TOMBSTONE_MS + 5, 1_795_000_000.1),
                          NO_ENCRYPTION)


def test_in_the_tombstones_own_millisecond_the_turns_own_time_decides():
    # A new turn of a conversation deleted in the same millisecond is kept...
    assert not predates_erase(str(TOMBSTONE_MS), job(TOMBSTONE_MS, 1_795_000_000.1235),
                              NO_ENCRYPTION)
    # ... and one made before the delete is dropped.
    assert predates_erase(str(TOMBSTONE_MS), job(TOMBSTONE_MS, 1_795_000_000.120),
                          NO_ENCRYPTION)


def test_without_a_tombstone_nothing_is_dropped():
    assert not predates_erase(None, job(1, 0.0), NO_ENCRYPTION)
