"""The memory layers' interfaces: an embedder and searchable indexes, per namespace.

A namespace is the hard partition of memory: conversation memory (older turns, summary chunks)
belongs to tenant + user + conversation; facts, and the user-level recall index (the turns and
chunks of all of an identified user's conversations, ids qualified by conversation), to
tenant + user. A search names exactly one namespace and can never return another's items.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from enum import Enum
from typing import Literal, Protocol, Sequence

import numpy as np

from gateway.core.ids import ConversationKey


@dataclass(frozen=True, slots=True)
class Namespace:
    kind: Literal["conversation", "facts", "user"]
    tenant: str
    user: str
    conversation: str | None = None

    @classmethod
    def of_conversation(cls, key: ConversationKey) -> Namespace:
        return cls("conversation", key.tenant, key.user, key.conversation)

    @classmethod
    def of_facts(cls, tenant: str, user: str) -> Namespace:
        return cls("facts", tenant, user)

    @classmethod
    def of_user(cls, tenant: str, user: str) -> Namespace:
        """The turns and summary chunks of all the user's conversations."""
        return cls("user", tenant, user)


class Unread(Enum):
    """A version counter the caller has not read (the index reads it itself)."""

    UNREAD = "unread"


UNREAD = Unread.UNREAD


class Embedder(Protocol):
    name: str
    """Names the vector space: two embedders with one name and dimension embed alike."""
    dim: int
    related_threshold: float
    """Cosine similarity at or above which two facts are duplicates, for this model.
    Thresholds are per model."""
    topic_shift_threshold: float
    """A new message less similar than this to every recent one changes the topic (the
    compactor's default; a tenant's `compaction.topic_shift_similarity` overrides it)."""
    relevance_floor: float | None
    """Recalled items less similar than this to the question are not forwarded
    (gateway/core/recall/relevance.py; a tenant's `memory.recall_relevance_floor` overrides
    it); None: no floor (not calibrated for this model)."""
    relevance_gate: float | None
    """When no recalled item is this similar to the question, none is forwarded (a tenant's
    `memory.recall_relevance_gate` overrides it); None: no gate."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32, rows L2-normalised: texts to store and compare (turns,
        chunks, facts). Blocking and CPU-bound: call it through `EmbeddingService`, never on
        the event loop."""
        ...

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        """As `embed`, for search queries (models trained with query/passage prefixes embed
        the two differently; for the others it is `embed`)."""
        ...


class VectorIndex(Protocol):
    async def search(self, namespace: Namespace, query: np.ndarray, k: int, *,
                     excluding: str | None = None, turns_only: bool = False,
                     version: str | None | Unread = UNREAD) -> list[tuple[str, float]]:
        """Ids and cosine similarities of the k nearest items of one namespace, best first.
        `excluding`: in a user namespace, a conversation whose items are left out;
        `turns_only`: summary chunks are left out (the k best turns, not the k best items
        with the chunks among them dropped); `version`: the namespace's version counter,
        when the caller has just read it (saves the index its own read)."""
        ...


class LexicalIndex(Protocol):
    async def search(self, namespace: Namespace, query: str, k: int, *,
                     excluding: str | None = None, turns_only: bool = False,
                     version: str | None | Unread = UNREAD,
                     today: datetime.date | None = None) -> list[tuple[str, float]]:
        """Ids and BM25 scores of the k best-matching items of one namespace, best first.
        `excluding`, `turns_only`, `version`: as for VectorIndex.search; `today`: the day the
        query's relative days count from (None: the latest day the namespace holds)."""
        ...
