"""In-process caches of per-namespace search structures, checked against the store's version.

Both search indexes (dense, lexical) build a structure per namespace from what the store
holds, keep it while the namespace's `version` counter is unchanged, and rebuild it when a
writer (any process) bumped the counter. This module holds what they share: which Redis keys
hold a namespace's data, and a bounded least-recently-used map of built structures.

Invariant: a namespace maps to keys derived from all of its fields (tenant, user and, for
conversation memory, the conversation), through the injective key space, so two namespaces
never share a key — a cached structure can only ever hold one namespace's items.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Generic, TypeVar

from gateway.core.ids import ConversationKey
from gateway.memory.records.keys import MemoryKeySpace
from gateway.memory.ports import Namespace

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class NamespaceKeys:
    version: str
    vectors: str
    documents: str
    """conversation: the `turns` hash; facts: the `facts` hash; user: the `recall` hash."""
    chunks: str | None
    """conversation: the summary chunks list; facts and user: None."""


def namespace_keys(keys: MemoryKeySpace, namespace: Namespace) -> NamespaceKeys:
    if namespace.kind == "conversation":
        if namespace.conversation is None:
            raise ValueError("a conversation namespace needs a conversation id")
        k = keys.conversation(ConversationKey(namespace.tenant, namespace.user,
                                              namespace.conversation))
        return NamespaceKeys(version=k.version, vectors=k.vectors, documents=k.turns,
                             chunks=k.chunks)
    if namespace.kind == "facts":
        u = keys.user(namespace.tenant, namespace.user)
        return NamespaceKeys(version=u.version, vectors=u.fact_vectors, documents=u.facts,
                             chunks=None)
    if namespace.kind == "user":
        u = keys.user(namespace.tenant, namespace.user)
        return NamespaceKeys(version=u.recall_version, vectors=u.recall_vectors,
                             documents=u.recall, chunks=None)
    raise ValueError(f"unknown namespace kind {namespace.kind!r}")


@dataclass(frozen=True, slots=True)
class Cached(Generic[T]):
    version: str | None
    """The namespace's version counter when `value` was built (None: no counter yet)."""
    value: T
    size: int
    """What `value` costs against the cache's budget (the search indexes: estimated bytes)."""


class NamespaceCache(Generic[T]):
    """Least-recently-used map Namespace -> Cached, bounded by entries and by `size` in total
    (a long conversation's index outweighs hundreds of short ones: the budget bounds memory,
    not only the count). The newest entry is always kept, whatever its size. A cached value
    that grows in place is accounted for when it is put again."""

    def __init__(self, max_namespaces: int = 256, max_size: int = 500_000):
        self.max_namespaces = max_namespaces
        self.max_size = max_size
        self._entries: OrderedDict[Namespace, Cached[T]] = OrderedDict()
        self._size = 0
        self.evictions = 0
        """Entries dropped to stay within the bounds so far."""

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size(self) -> int:
        """The sizes of the entries held, summed."""
        return self._size

    def get(self, namespace: Namespace) -> Cached[T] | None:
        entry = self._entries.get(namespace)
        if entry is not None:
            self._entries.move_to_end(namespace)
        return entry

    def put(self, namespace: Namespace, entry: Cached[T]) -> None:
        old = self._entries.pop(namespace, None)
        if old is not None:
            self._size -= old.size
        self._entries[namespace] = entry
        self._size += entry.size
        while len(self._entries) > 1 and (len(self._entries) > self.max_namespaces
                                          or self._size > self.max_size):
            _, evicted = self._entries.popitem(last=False)
            self._size -= evicted.size
            self.evictions += 1
