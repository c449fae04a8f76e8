"""The archive of a long conversation: its oldest messages, moved out of the live transcript.

A conversation that grows past its tenant's `request_limits.max_stored_messages` is not
refused — chat keeps working. Once the memory worker has processed its oldest messages (turn
index, summary chunks, facts: they stay recallable), they move from the transcript list
(`ConversationKeys.transcript`, what every request loads and reconciles) to the archive list
(`ConversationKeys.archive`), oldest first. Invariants:
- nothing is lost: a move is one script, so archive + transcript is at every moment the whole
  active branch in order; the archive is only appended to (and deleted with the conversation
  or the user: its key is under the conversation's key base);
- only what memory has processed moves: `trim` is given the branch the memory worker has
  just processed and moves at most its messages, checked against the store first (the
  archive's length, and the sha1 of the last element to move: messages are hash-chained, so
  that element at its place vouches for every one before it);
- the transcript starts at a user message after a move, so a tool call is never separated
  from its result and a client resending its whole history realigns on a turn;
- the request path's cost is bounded by the cap: it reads the transcript only. The archive is
  read by the memory worker (through a cache: only elements appended since are decoded) and
  by the memory API (the conversation as the user sees it: archive first).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence

import redis.asyncio as aioredis

from gateway.core.ids import ConversationKey
from gateway.core.messages import StoredMessage
from gateway.store.codec import decode_stored
from gateway.store.encryption.crypto import NO_ENCRYPTION, Encryption
from gateway.store.keys import KeySpace
from gateway.store.transcript_cache import LIST_LUA, TranscriptCache

log = logging.getLogger("gateway.store")

# KEYS: the archive. ARGV: as LIST_LUA. Returns {how, elements}.
_READ_LUA = LIST_LUA + """
return {how, elements}
"""

# KEYS: transcript, archive. ARGV: how many to move, the archive's length they were counted
# against, the sha1 of the last element to move. Moves the transcript's first elements to the
# archive's end only if nothing changed since they were checked; returns how many moved (0:
# something did — the caller tries again after the next memory run).
_TRIM_LUA = """
if redis.call('LLEN', KEYS[2]) ~= tonumber(ARGV[2]) then return 0 end
local n = tonumber(ARGV[1])
local last = redis.call('LINDEX', KEYS[1], n - 1)
if not last or redis.sha1hex(last) ~= ARGV[3] then return 0 end
for _ = 1, n do redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT') end
return n
"""


class ArchiveMismatch(RuntimeError):
    """The archive does not end where the transcript starts (the conversation was deleted or
    changed between two reads); the caller reads again later."""


def movable(processed: Sequence[StoredMessage], excess: int) -> int:
    """How many of the transcript's first messages may move to the archive: at most `excess`
    (the transcript's length beyond the cap), only messages memory has processed
    (`processed`: the transcript's first messages as memory saw them), and so many that the
    first message left is a user message (one it has processed too: its role is known)."""
    for k in range(min(excess, len(processed) - 1), 0, -1):
        if processed[k].message.role == "user":
            return k
    return 0


class TranscriptArchive:
    """Reads and fills the archives of conversations; see the module docstring."""

    def __init__(self, client: aioredis.Redis, keys: KeySpace, *,
                 encryption: Encryption = NO_ENCRYPTION):
        self._redis = client
        self.keys = keys
        self.encryption = encryption
        self.cache = TranscriptCache(encryption=encryption)
        """Decoded archives (append-only lists: a read decodes only what was added)."""
        self._read_script = client.register_script(_READ_LUA)
        self._trim_script = client.register_script(_TRIM_LUA)
        self.moved = 0
        """Messages this process moved to archives (for tests and logs)."""

    async def read(self, key: ConversationKey) -> tuple[StoredMessage, ...]:
        """The conversation's archive, oldest first (empty if it has none)."""
        cached = self.cache.get(key)
        how, elements = await self._read_script(keys=[self.keys.conversation(key).archive],
                                                args=self.cache.args(cached))
        return self.cache.resolve(key, cached, int(how), elements)

    async def branch(self, key: ConversationKey, live: tuple[StoredMessage, ...],
                     offset: int) -> tuple[StoredMessage, ...]:
        """The whole branch: the first `offset` archived messages (the transcript's offset
        when `live` was read — the archive only grows, so it holds them), then `live`."""
        archived = (await self.read(key))[:offset]
        if len(archived) < offset or (live and live[0].parent_id != archived[-1].id):
            raise ArchiveMismatch(f"the archive of {key} does not end where its transcript "
                                  "starts")
        return archived + live

    async def before(self, key: ConversationKey,
                     live: tuple[StoredMessage, ...]) -> tuple[StoredMessage, ...]:
        """The archived messages before `live` (a transcript read earlier): the archive up to
        the parent of `live`'s first message — moves made since that read are not repeated."""
        if live and live[0].parent_id is None:
            return ()  # the transcript starts at the conversation's start: nothing before it
        archived = await self.read(key)
        if not live:
            return archived
        for i in range(len(archived) - 1, -1, -1):
            if archived[i].id == live[0].parent_id:
                return archived[:i + 1]
        raise ArchiveMismatch(f"the archive of {key} does not hold the parent of its "
                              "transcript's first message")

    async def trim(self, key: ConversationKey, branch: Sequence[StoredMessage],
                   cap: int) -> int:
        """Move the transcript's oldest messages beyond `cap` to the archive, among those of
        `branch` (the whole branch the memory worker has processed, archive first). Returns
        how many moved (0: none could, or the conversation changed meanwhile)."""
        ck = self.keys.conversation(key)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.llen(ck.archive)
            pipe.llen(ck.transcript)
            offset, length = await pipe.execute()
        count = movable(branch[offset:], length - cap)
        if not count:
            return 0
        last = await self._redis.lindex(ck.transcript, count - 1)
        if last is None or decode_stored(self.encryption.open(key.tenant, last)).id \
                != branch[offset + count - 1].id:
            return 0  # the transcript is not the branch memory processed (a fork since)
        moved = int(await self._trim_script(
            keys=[ck.transcript, ck.archive],
            args=[count, offset, hashlib.sha1(last.encode()).hexdigest()]))
        if moved:
            self.moved += moved
            log.info("archived the %d oldest messages of %s (%d archived in all)", moved, key,
                     offset + moved)
        return moved
