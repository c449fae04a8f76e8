"""The stored entries behind recall's candidate ids (gateway/memory/recall/recaller.py): the
conversation's turns and summary chunks, the items of the user's other conversations (user
namespace), with the links between turns, read in one pipelined round trip per call and kept
in process per namespace version (gateway/memory/recall/entry_cache.py).

Invariants: an id whose entry is gone (deleted since the index was built) or unreadable is
left out, never an error; so is a one-shot placeholder (indexes written before placeholders
were left out hold some: gateway/core/memory/content.py) and, unless the tenant allows it, a
tool result of another conversation; the current conversation's items are never taken from
the user namespace; entries are opened with the tenant's encryption; a turn is returned with
the text its entry holds (redacted, date-anchored).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis.asyncio as aioredis

from gateway.core.memory.compaction import render_chunk
from gateway.core.memory.content import TOOL_ROLES, is_indexed_placeholder
from gateway.core.ids import ConversationKey
from gateway.core.recall.recollection import Recollection
from gateway.memory.records.chunk_store import chunk_from_json
from gateway.memory.recall.entry_cache import Entries, EntryCache, Link
from gateway.memory.records.keys import MemoryKeySpace
from gateway.memory.search.lexical_index import CHUNK_PREFIX, chunk_id
from gateway.memory.ports import Namespace
from gateway.memory.records.user_recall import Synced, qualified_id, split_id
from gateway.store.codec import json_object
from gateway.store.encryption.crypto import NO_ENCRYPTION, Encryption


@dataclass(frozen=True, slots=True)
class OwnItems:
    """The current conversation's items by id, and the links of its turns."""

    items: dict[str, Recollection]
    links: dict[str, Link]


@dataclass(frozen=True, slots=True)
class OtherItems:
    """Items of the user's other conversations, and the links of their turns."""

    placed: list[tuple[float, str, Recollection]]
    """(when its conversation started, the conversation, the item)."""
    links: dict[str, Link]


class EntryReader:
    def __init__(self, redis: aioredis.Redis, keys: MemoryKeySpace, *,
                 encryption: Encryption = NO_ENCRYPTION):
        """`encryption` opens the stored entries."""
        self.redis = redis
        self.keys = keys
        self.encryption = encryption
        self.cache = EntryCache()

    async def others(self, key: ConversationKey, candidates: list[str], *,
                     linked: bool = True, version: str | None = None,
                     tool_results: bool = False) -> OtherItems:
        """The user-namespace items behind candidate ids, each with when its conversation
        started and its conversation (for ordering), and (if `linked`) the qualified ids of
        the turns before and after each turn. The current conversation's are left out (the
        indexes already leave them out; this holds even for a stale cached index). `version`:
        the user namespace's version counter as the request read it (entries known at it come
        from the in-process cache). `tool_results`: tool results are recalled too (mirrored
        only when the tenant allows it, but an index mirrored before may hold some)."""
        split = {i: split_id(i) for i in candidates}
        candidates = [i for i in candidates if split[i][0] != key.conversation]
        if not candidates:
            return OtherItems([], {})
        namespace = Namespace.of_user(key.tenant, key.user)
        known = self.cache.entries(namespace, version)
        if known is None:
            known = Entries("")  # no version to key by: read everything, keep nothing
        needed = [i for i in candidates if (hit := known.turns.get(i)) is None
                  or (linked and hit[0].kind == "turn" and hit[1] is None)]
        if needed or any(split[i][0] not in known.started for i in candidates):
            await self._read_user(key, known, needed, split, linked=linked)
            if version is not None:
                self.cache.grew(namespace, known)
        found, links = [], {}
        for item_id in candidates:
            if (hit := known.turns.get(item_id)) is None or not _recallable(hit[0],
                                                                            tool_results):
                continue
            conversation = split[item_id][0]
            found.append((known.started.get(conversation, 0.0), conversation, hit[0]))
            if linked and hit[1] is not None:
                links[item_id] = hit[1]
        return OtherItems(found, links)

    async def _read_user(self, key: ConversationKey, known: Entries, item_ids: list[str],
                         split: dict[str, tuple[str, str]], *, linked: bool) -> None:
        """Read into `known` the user-namespace entries of `item_ids` (turns with their links
        if `linked`) and when each of their conversations started."""
        uk = self.keys.user(key.tenant, key.user)
        by_conversation: dict[str, list[str]] = {}
        for i in item_ids:
            by_conversation.setdefault(split[i][0], []).append(i)
        conversations = sorted(set(by_conversation) | {
            c for c, _ in split.values() if c != key.conversation and c not in known.started})
        async with self.redis.pipeline(transaction=False) as pipe:
            if conversations:
                pipe.hmget(uk.recall_synced, conversations)
            if item_ids:
                pipe.hmget(uk.recall, item_ids)
            if linked:  # the user's own conversations: same tenant, same user
                for c in by_conversation:
                    pipe.hmget(self.keys.conversation(
                        ConversationKey(key.tenant, key.user, c)).following,
                        [split[i][1] for i in by_conversation[c]])
            results = list(await pipe.execute())
        raw_synced = results.pop(0) if conversations else []
        raw_items = results.pop(0) if item_ids else []
        raw_following = results  # one reply per conversation of `by_conversation`, if linked
        known.started.update({c: synced.started_at if (synced := Synced.parse(raw)) else 0.0
                              for c, raw in zip(conversations, raw_synced)})
        following: dict[str, str] = {}
        for c, raw_ids in zip(by_conversation, raw_following):
            following.update({i: qualified_id(c, f)
                              for i, f in zip(by_conversation[c], raw_ids) if f})
        for item_id, raw in zip(item_ids, raw_items):
            entry = json_object(self.encryption.open_or_none(key.tenant, raw))
            if entry is None or not isinstance(entry.get("text"), str) or not entry["text"] \
                    or entry.get("kind") not in ("turn", "chunk"):
                continue  # gone since the index was built, or unreadable: left out
            conversation = split[item_id][0]
            link = None
            if linked and entry["kind"] == "turn":
                before = entry.get("prev")
                link = Link(qualified_id(conversation, before) if isinstance(before, str)
                            else None, following.get(item_id))
            known.turns[item_id] = (Recollection(
                entry["kind"], item_id, entry["text"],
                tuple(str(s) for s in entry.get("source_ids") or ()),
                int(entry.get("position", -1)), 0.0, role=_role(entry)), link)

    async def own(self, key: ConversationKey, candidates: list[str], *,
                  linked: bool = True, version: str | None = None) -> OwnItems:
        """The stored items of the conversation behind candidate ids (score 0), and (if
        `linked`) the ids of the turns before and after each turn. Ids whose entry is gone
        (deleted since the index was built) or unreadable are left out. `version`: the
        namespace's version counter as the request read it — items known at that version
        come from the in-process cache (gateway/memory/recall/entry_cache.py), the rest are read."""
        if not candidates:
            return OwnItems({}, {})
        namespace = Namespace.of_conversation(key)
        known = self.cache.entries(namespace, version)
        if known is None:
            known = Entries("")  # no version to key by: read everything, keep nothing
        turn_ids, link_ids = [], []
        for i in candidates:
            if i.startswith(CHUNK_PREFIX):
                continue
            if (hit := known.turns.get(i)) is None:
                turn_ids.append(i)
            elif linked and hit[1] is None:
                # A turn carried over new turns needs only its successor; one read without
                # its link needs its entry again (the turn before it is in the entry).
                (link_ids if i in known.unlinked else turn_ids).append(i)
        wants_chunks = known.chunks is None and any(i.startswith(CHUNK_PREFIX)
                                                    for i in candidates)
        if turn_ids or link_ids or wants_chunks:
            await self._read(key, known, turn_ids, linked=linked, chunks=wants_chunks,
                             link_ids=link_ids)
            if version is not None:
                self.cache.grew(namespace, known)
        items: dict[str, Recollection] = {}
        links: dict[str, Link] = {}
        for item_id in candidates:
            if item_id.startswith(CHUNK_PREFIX):
                if (chunk := (known.chunks or {}).get(item_id)) is not None:
                    items[item_id] = chunk
            elif (turn := known.turns.get(item_id)) is not None \
                    and not is_indexed_placeholder(turn[0].text):
                items[item_id] = turn[0]
                if linked and turn[1] is not None:
                    links[item_id] = turn[1]
        return OwnItems(items, links)

    async def _read(self, key: ConversationKey, known: Entries, turn_ids: list[str], *,
                    linked: bool, chunks: bool, link_ids: Sequence[str] = ()) -> None:
        """Read the entries of `turn_ids` (with their links if `linked`), the successors of
        the known turns `link_ids` (in `known.unlinked`), and, if `chunks`, every summary
        chunk, into `known`."""
        ck = self.keys.conversation(key)
        async with self.redis.pipeline(transaction=False) as pipe:
            if turn_ids:
                pipe.hmget(ck.turns, turn_ids)
            if (turn_ids and linked) or link_ids:
                pipe.hmget(ck.following, [*(turn_ids if linked else ()), *link_ids])
            if chunks:
                pipe.lrange(ck.chunks, 0, -1)
            results = list(await pipe.execute())
        raw_turns = results.pop(0) if turn_ids else []
        following = results.pop(0) if (turn_ids and linked) or link_ids else []
        raw_following = following[:len(turn_ids)] if linked else [None] * len(turn_ids)
        for item_id, after in zip(link_ids, following[len(turn_ids) if linked else 0:]):
            # A concurrent request (same cached entries) may have linked it meanwhile.
            if item_id in known.unlinked:
                known.turns[item_id] = (known.turns[item_id][0],
                                        Link(known.unlinked.pop(item_id), after))
        for item_id, raw, after in zip(turn_ids, raw_turns, raw_following):
            entry = json_object(self.encryption.open_or_none(key.tenant, raw))
            if entry is not None and isinstance(entry.get("text"), str):
                before = entry.get("prev")
                if linked:
                    known.unlinked.pop(item_id, None)
                # A turn read again for its link (it was read without one) is the same turn:
                # its entry never changes under its id, so what was derived from it is kept.
                seen = known.turns.get(item_id)
                known.turns[item_id] = (
                    seen[0] if seen is not None else
                    Recollection("turn", item_id, entry["text"], (item_id,),
                                 int(entry.get("position", -1)), 0.0, role=_role(entry)),
                    Link(before if isinstance(before, str) else None, after) if linked
                    else None)
        if chunks:
            known.chunks, decoded = {}, {}
            for raw in results.pop(0):
                chunk = known.decoded[raw] if raw in known.decoded else self._chunk(key, raw)
                decoded[raw] = chunk
                if chunk is not None:
                    known.chunks[chunk.id] = chunk
            known.decoded = decoded

    def _chunk(self, key: ConversationKey, raw: str) -> Recollection | None:
        """A stored chunk as recall shows it; None if unreadable (left out, like a vanished
        turn) or deleted by the user (blank)."""
        try:
            chunk = chunk_from_json(self.encryption.open(key.tenant, raw))
        except ValueError:
            return None
        text = render_chunk(chunk)  # with its date span; "" once deleted by the user
        if not text:
            return None
        return Recollection("chunk", chunk_id(chunk.id), text, chunk.source_ids,
                            chunk.first_position, 0.0)


def _recallable(item: Recollection, tool_results: bool) -> bool:
    """Whether an item of the user's other conversations may be recalled."""
    return (tool_results or item.role not in TOOL_ROLES) \
        and not is_indexed_placeholder(item.text)


def _role(entry: dict) -> str | None:
    role = entry.get("role")
    return role if isinstance(role, str) else None
