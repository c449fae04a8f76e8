"""Decoded transcripts kept in process, checked against the store on every load.

Loading a conversation used to read and decode its whole transcript on every request (at 300
turns most of the store's share of the request). A transcript is append-only between branch
edits and its messages are hash-chained, so its length and its last element identify all of
it: the load script compares them with what this cache holds and sends nothing when they
match, only the elements after the cached ones when the cached last element is still in its
place (the conversation grew), and the whole transcript otherwise. Replicas stay correct without invalidation messages — every load checks.

Bounded: least recently used conversations are dropped beyond `max_conversations` or
`max_messages` in total (the newest entry is always kept).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

from gateway.core.ids import ConversationKey
from gateway.core.messages import StoredMessage


@dataclass(frozen=True, slots=True)
class CachedTranscript:
    length: int
    last_sha1: str
    """sha1 (hex) of the last element as stored (the JSON text); "" when empty."""
    messages: tuple[StoredMessage, ...]


def last_sha1(raw: list[str]) -> str:
    return hashlib.sha1(raw[-1].encode()).hexdigest() if raw else ""


class TranscriptCache:
    def __init__(self, max_conversations: int = 2048, max_messages: int = 500_000):
        self.max_conversations = max_conversations
        self.max_messages = max_messages
        self._entries: OrderedDict[ConversationKey, CachedTranscript] = OrderedDict()
        self._messages = 0
        self.hits = 0
        self.extended = 0
        """Loads that decoded only the messages appended since the cached transcript."""
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: ConversationKey) -> CachedTranscript | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def put(self, key: ConversationKey, entry: CachedTranscript) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._messages -= len(old.messages)
        self._entries[key] = entry
        self._messages += len(entry.messages)
        while len(self._entries) > 1 and (len(self._entries) > self.max_conversations
                                          or self._messages > self.max_messages):
            _, evicted = self._entries.popitem(last=False)
            self._messages -= len(evicted.messages)
