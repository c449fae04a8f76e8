"""Decoded transcripts kept in process, checked against the store on every load.

Loading a conversation used to read and decode its whole transcript on every request (at 300
turns most of the store's share of the request). A transcript is append-only between branch
edits and its messages are hash-chained, so its length and its last element identify all of
it: the load script compares them with what this cache holds and sends nothing when they
match, only the elements after the cached ones when the cached last element is still in its
place (the conversation grew), and the whole transcript otherwise. Replicas stay correct
without invalidation messages — every load checks.

The oldest messages of a long conversation may move to its archive list (gateway/store/
archive.py): the live list is then trimmed from the left. Lengths are therefore counted from
the conversation's start — archived messages included (`offset`: how many there are, the
archive's length) — so a cached transcript stays usable after a trim: its first `offset`
difference of messages is dropped, and only what was appended is decoded.

Bounded: least recently used conversations are dropped beyond `max_conversations` or beyond
`max_bytes` of decoded messages in total, estimated from the stored elements' lengths (the
newest entry is always kept). A conversation this process deletes, or a user it erases, is
dropped at once: its text does not stay in the process's memory until it ages out.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.core.ids import ConversationKey
from gateway.core.messages import StoredMessage
from gateway.store.codec import decode_stored
from gateway.store.encryption.crypto import NO_ENCRYPTION, Encryption

# The first part of a script reading a transcript against a cached copy. KEYS[1]: the
# transcript (the live list); KEYS[2]: its archive (the messages trimmed from its left: their
# count is the live list's offset). ARGV[1], ARGV[2]: the cached end counted from the
# conversation's start (-1: none) and the sha1 of the cached last element. Leaves `how` (1:
# the cached transcript is the transcript, no elements; 2: it is a prefix of it, elements: the
# ones after it; 0: otherwise, elements: the whole live list), `elements` and `offset` for the
# rest of the script to return. Messages are hash-chained, so an element equal to the cached
# last one, at its place, means the elements before it are the cached ones too.
_TRANSCRIPT_TEMPLATE = """
local n = redis.call('LLEN', KEYS[1])
local offset = OFFSET
local cached = tonumber(ARGV[1]) - offset
local how = 0
local elements = {}
if n > 0 and cached > 0 and n >= cached
   and redis.sha1hex(redis.call('LINDEX', KEYS[1], cached - 1)) == ARGV[2] then
  if n == cached then how = 1 else
    how = 2
    elements = redis.call('LRANGE', KEYS[1], cached, -1)
  end
elseif n > 0 then
  elements = redis.call('LRANGE', KEYS[1], 0, -1)
end
"""
TRANSCRIPT_LUA = _TRANSCRIPT_TEMPLATE.replace("OFFSET", "redis.call('LLEN', KEYS[2])")
LIST_LUA = _TRANSCRIPT_TEMPLATE.replace("OFFSET", "0")
"""The same against a list with no archive of its own (KEYS[1] only; `offset` is 0): an
append-only list such as the archive itself."""

MAX_BYTES = 64 << 20
"""What one cache's decoded messages may hold, estimated (`element_bytes`)."""
MESSAGE_BYTES = 300
"""A decoded message's objects beside its text (its id, parent id, `Message`, dict)."""


def element_bytes(element: str) -> int:
    """What a stored element costs once decoded, estimated: its text (one byte a character
    for ASCII, two otherwise, as CPython stores it) plus `MESSAGE_BYTES`."""
    return (len(element) if element.isascii() else 2 * len(element)) + MESSAGE_BYTES


@dataclass(frozen=True, slots=True)
class CachedTranscript:
    length: int
    """Elements of the live list (`messages`)."""
    last_sha1: str
    """sha1 (hex) of the last element as stored (the JSON text); "" when empty."""
    messages: tuple[StoredMessage, ...]
    offset: int = 0
    """Messages archived before the first of `messages` when it was read."""
    size: int = 0
    """`messages` in memory, estimated (`element_bytes`)."""

    def dropping(self, first: int) -> int:
        """The estimated size of `messages[first:]` (in proportion to the messages kept)."""
        total = len(self.messages)
        return self.size * max(0, total - first) // total if total else 0


def last_sha1(raw: list[str]) -> str:
    return hashlib.sha1(raw[-1].encode()).hexdigest() if raw else ""


class TranscriptCache:
    """See the module docstring. `args(key)` are the script's ARGV for a conversation;
    `resolve` turns the script's answer into the transcript, decoding only what is new."""

    def __init__(self, max_conversations: int = 2048, max_bytes: int = MAX_BYTES, *,
                 encryption: Encryption = NO_ENCRYPTION):
        """`encryption` opens the elements (sealed or not, their sha1 is of what is stored)."""
        self.encryption = encryption
        self.max_conversations = max_conversations
        self.max_bytes = max_bytes
        self._entries: OrderedDict[ConversationKey, CachedTranscript] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.extended = 0
        """Loads that decoded only the messages appended since the cached transcript."""
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        """The cached transcripts' estimated size in memory."""
        return self._bytes

    def get(self, key: ConversationKey) -> CachedTranscript | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def put(self, key: ConversationKey, entry: CachedTranscript) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old.size
        self._entries[key] = entry
        self._bytes += entry.size
        while len(self._entries) > 1 and (len(self._entries) > self.max_conversations
                                          or self._bytes > self.max_bytes):
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= evicted.size

    def forget(self, key: ConversationKey) -> None:
        """Drop the conversation's transcript (it was deleted)."""
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= entry.size

    def forget_user(self, tenant: str, user: str) -> None:
        """Drop every transcript of the user (erased)."""
        for key in [k for k in self._entries if k.tenant == tenant and k.user == user]:
            self.forget(key)

    def args(self, cached: CachedTranscript | None) -> list[object]:
        """ARGV[1], ARGV[2] of TRANSCRIPT_LUA for what is cached (or nothing)."""
        return [cached.offset + cached.length if cached else -1,
                cached.last_sha1 if cached else ""]

    def resolve(self, key: ConversationKey, cached: CachedTranscript | None, how: int,
                elements: Sequence[str], offset: int = 0) -> tuple[StoredMessage, ...]:
        """The live transcript TRANSCRIPT_LUA described (for `cached`, as passed to `args`;
        `offset`: the script's), caches it."""
        offset = int(offset)
        if how in (1, 2) and cached is not None:
            # Messages archived since it was cached leave its front (none: nothing to drop).
            kept = cached.messages[offset - cached.offset:]
            size = cached.dropping(offset - cached.offset)
            if how == 1:
                self.hits += 1
                if offset != cached.offset:
                    self.put(key, CachedTranscript(len(kept), cached.last_sha1, kept, offset,
                                                   size))
                return kept
            self.extended += 1  # appended to: decode only what is new
            messages = kept + self._decode(key, elements)
            self.put(key, CachedTranscript(len(messages), last_sha1(list(elements)), messages,
                                           offset, size + sum(map(element_bytes, elements))))
            return messages
        self.misses += 1
        messages = self._decode(key, elements)
        if messages:
            self.put(key, CachedTranscript(len(elements), last_sha1(list(elements)), messages,
                                           offset, sum(map(element_bytes, elements))))
        else:
            self.forget(key)  # the store has none (deleted, or not yet applied)
        return messages

    def _decode(self, key: ConversationKey, elements: Sequence[str]
                ) -> tuple[StoredMessage, ...]:
        if not self.encryption.enabled:
            return tuple(decode_stored(text) for text in elements)
        return tuple(decode_stored(self.encryption.open(key.tenant, text)) for text in elements)
