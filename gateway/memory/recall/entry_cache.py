"""The decoded items of conversation namespaces, cached in process per version counter.

A warm recall reads and decodes the stored entries behind ~100 candidate ids (HMGETs of the
turns and their links, JSON, decryption) twice per request, per namespace searched (the
conversation's and, for an identified user, the user's; its cost:
docs/decisions.md#the-entry-cache-gatewaymemoryrecallentry_cachepy). Those entries change
only together with the namespace's version counter — every writer of turns, links and chunks
bumps it in the same transaction — so a map id -> decoded item, started afresh whenever the
version a request read differs from the one it was filled under, serves them without a round
trip.

A conversation namespace changes mostly by additions — each recorded turn bumps its counter,
so every request after a turn would start afresh and read ~100 entries again. A turn's entry
never changes under its id (the id is a hash of the turn and everything before it), so when
the counter only grew by additions (`versions.only_added`: removals of turns jump it) the new
map starts with the old one's turns, and with the links that cannot have changed (a turn
that had a successor keeps it; the last turn's gets one: read again). Chunks (rewritten and
deletable by the user) and user namespaces (a deleted conversation's items leave them with an
ordinary bump) always start afresh — but a conversation's chunk list is read again as stored,
and a chunk stored exactly as before is not opened and decoded again (`Entries.decoded`:
stored text -> chunk, carried over any change of the counter, since it is keyed by content).

Invariants: a map is only used for the namespace and the version it was filled under; a
namespace without a version counter is never cached; an item is cached as the store held it
at that version or later (items are read after the version), never older — except a
conversation's turns carried over additions, which are what the store holds at the new
version too; a turn whose entry was missing is not cached (it is read again next time);
bounded like the search indexes' caches (least recently used namespaces first).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.core.recall.recollection import Recollection
from gateway.memory.search.namespace_cache import Cached, NamespaceCache
from gateway.memory.ports import Namespace
from gateway.store.versions import only_added


@dataclass(frozen=True, slots=True)
class Link:
    """A turn's neighbours in its conversation (ids as the namespace names them)."""

    previous: str | None
    following: str | None


@dataclass(slots=True)
class Entries:
    """What is known of one namespace at one version."""

    version: str
    turns: dict[str, tuple[Recollection, Link | None]] = field(default_factory=dict)
    """Turn id -> the turn and its link (None: the link was not read with it)."""
    chunks: dict[str, Recollection] | None = None
    """Chunk id -> chunk, every readable chunk of the namespace; None: not read yet."""
    started: dict[str, float] = field(default_factory=dict)
    """User namespaces: conversation id -> when it started (orders its items)."""
    unlinked: dict[str, str | None] = field(default_factory=dict)
    """Turns carried over additions whose successor must be read again (their link is None
    in `turns`) -> the turn before them, which cannot have changed."""
    decoded: dict[str, Recollection | None] = field(default_factory=dict)
    """Conversation namespaces: each chunk as stored when the list was last read -> what it
    decodes to (None: unreadable or deleted); replaced at each read of the list."""

    @property
    def size(self) -> int:
        return len(self.turns) + len(self.chunks or ()) + len(self.started)


class EntryCache:
    def __init__(self, max_namespaces: int = 256, max_items: int = 50_000):
        self._cache: NamespaceCache[Entries] = NamespaceCache(max_namespaces, max_items)

    def entries(self, namespace: Namespace, version: str | None) -> Entries | None:
        """The namespace's entries at `version` (empty when first asked at that version);
        None when there is no version to key them by."""
        if version is None:
            return None
        cached = self._cache.get(namespace)
        if cached is not None and cached.version == version:
            return cached.value
        entries = Entries(version)
        if cached is not None and namespace.kind == "conversation":
            entries.decoded = cached.value.decoded
            if only_added(cached.version, version):
                old = cached.value
                entries.turns = dict(old.turns)
                open_ended = [(i, turn, link) for i, (turn, link) in old.turns.items()
                              if link is not None and link.following is None]
                for i, turn, link in open_ended:  # the last turn may have a successor now
                    entries.unlinked[i] = link.previous
                    entries.turns[i] = (turn, None)
                entries.unlinked.update(old.unlinked)
        self._cache.put(namespace, Cached(version, entries, entries.size))
        return entries

    def grew(self, namespace: Namespace, entries: Entries) -> None:
        """Account for items added to `entries` (keeps the cache within its item budget)."""
        cached = self._cache.get(namespace)
        if cached is not None and cached.value is entries:
            self._cache.put(namespace, Cached(entries.version, entries, entries.size))
