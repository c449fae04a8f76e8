"""The decoded items of conversation namespaces, cached in process per version counter.

A warm recall reads and decodes the stored entries behind ~100 candidate ids (HMGETs of the
turns and their links, JSON, decryption) twice per request, per namespace searched (the
conversation's and, for an identified user, the user's): at 10k turns about 2 ms of the
request path (bench/recall_latency.py). Those entries change only together with the
namespace's version counter — every writer of turns, links and chunks bumps it in the same
transaction — so a map id -> decoded item, started afresh whenever the version a request read
differs from the one it was filled under, serves them without a round trip.

Invariants: a map is only used for the namespace and the version it was filled under; a
namespace without a version counter is never cached; an item is cached as the store held it
at that version or later (items are read after the version), never older; a turn whose entry
was missing is not cached (it is read again next time); bounded like the search indexes'
caches (least recently used namespaces first).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.core.recall import Recollection
from gateway.memory.namespace_cache import Cached, NamespaceCache
from gateway.memory.ports import Namespace


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
        self._cache.put(namespace, Cached(version, entries, 0))
        return entries

    def grew(self, namespace: Namespace, entries: Entries) -> None:
        """Account for items added to `entries` (keeps the cache within its item budget)."""
        cached = self._cache.get(namespace)
        if cached is not None and cached.value is entries:
            self._cache.put(namespace, Cached(entries.version, entries, entries.size))
