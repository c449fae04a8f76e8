"""Every Redis key of the memory layers, built in one place (beside gateway/store/keys.py).

Per conversation (one user of one tenant): keys extend the conversation's own key base, so
erasing a user's conversations (SCAN `KeySpace.conversations_of`) removes them too.
Per user: keys under `<prefix>:u:<tenant>:<user>:` (in a cluster `<prefix>:{<shard tag>}:u:...`,
the same tag as the user's conversations, see gateway/store/keys.py), parts length-prefixed like the store's —
facts, profile, settings and the user-level recall index (the turns and summary chunks of the
user's conversations, mirrored by the memory worker), so erasing a user removes them all.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.core.ids import ConversationKey
from gateway.store.keys import KeySpace, _part


@dataclass(frozen=True, slots=True)
class ConversationMemoryKeys:
    turns: str
    """Hash: stored message id -> JSON TurnEntry (redacted text, date anchor, position)."""
    watermark: str
    """String: how many transcript messages (from the start of the active branch) are indexed."""
    vectors: str
    """Hash: item id (turn id or chunk id) -> float32 vector bytes (the embedder's dimension)."""
    version: str
    """String counter: bumped on every change to turns/chunks/vectors; caches compare it."""
    chunks: str
    """List: JSON summary chunks, oldest first."""
    lock: str
    """String: held (SET NX PX) by the memory worker processing this conversation."""
    processed: str
    """String "<count>:<last id>": the transcript prefix the memory worker has processed."""
    following: str
    """Hash: turn id -> the id of the indexed turn after it (recall shows a hit's successor)."""
    pins: str
    """Hash: pinned message id -> JSON pin (the message, source, pinned_at); see
    gateway/memory/records/pin_store.py."""
    topics: str
    """Hash: "current" -> the current topic segment, "history" -> every segment, "through"
    -> transcript messages walked (JSON, sealed); see gateway/memory/records/topic_store.py."""
    brief: str
    """String: the conversation's memory brief (sealed JSON); see
    gateway/memory/records/brief_store.py."""

    def all(self) -> tuple[str, ...]:
        return (self.turns, self.watermark, self.vectors, self.version, self.chunks, self.lock,
                self.processed, self.following, self.pins, self.topics, self.brief)


@dataclass(frozen=True, slots=True)
class UserMemoryKeys:
    facts: str
    """Hash: fact key -> JSON fact (value, type, importance, confidence, sources, history)."""
    fact_vectors: str
    """Hash: fact key -> float32 vector bytes."""
    version: str
    """String counter: bumped on every change to facts/vectors."""
    profile: str
    """Hash: profile field -> JSON value (language, answer_length, expertise, custom...)."""
    settings: str
    """Hash: memory (on/off), auto_extract (on/off)."""
    recall: str
    """Hash: "<conversation>/<item id>" -> JSON entry of a turn or summary chunk of one of the
    user's conversations (see gateway/memory/jobs/user_index.py): the user-level recall index."""
    recall_vectors: str
    """Hash: the same ids -> float32 vector bytes (copied from the conversation's vectors)."""
    recall_version: str
    """String counter: bumped on every change to recall/recall_vectors."""
    recall_synced: str
    """Hash: conversation id -> the conversation's memory version last mirrored."""
    recall_members_base: str
    """Prefix of the per-conversation sets of mirrored ids (`recall_members`)."""

    def recall_members(self, conversation: str) -> str:
        """Set: the ids of `recall` that belong to `conversation`."""
        return f"{self.recall_members_base}:{_part(conversation)}"

    def all(self) -> tuple[str, ...]:
        """The fixed keys (the per-conversation member sets match `user_pattern` too)."""
        return (self.facts, self.fact_vectors, self.version, self.profile, self.settings,
                self.recall, self.recall_vectors, self.recall_version, self.recall_synced)


@dataclass(frozen=True, slots=True)
class MemoryKeySpace:
    store: KeySpace = KeySpace()

    def conversation(self, key: ConversationKey) -> ConversationMemoryKeys:
        base = self.store.conversation(key).transcript.removesuffix(":transcript")
        return ConversationMemoryKeys(
            turns=f"{base}:m:turns", watermark=f"{base}:m:watermark",
            vectors=f"{base}:m:vectors", version=f"{base}:m:version",
            chunks=f"{base}:m:chunks", lock=f"{base}:m:lock", processed=f"{base}:m:processed",
            following=f"{base}:m:next", pins=f"{base}:m:pins",
            topics=f"{base}:m:topics", brief=f"{base}:m:brief")

    def user(self, tenant: str, user: str) -> UserMemoryKeys:
        base = f"{self.store.user_head(tenant, user)}:u:{_part(tenant)}:{_part(user)}"
        return UserMemoryKeys(facts=f"{base}:facts", fact_vectors=f"{base}:fact_vectors",
                              version=f"{base}:version", profile=f"{base}:profile",
                              settings=f"{base}:settings", recall=f"{base}:recall",
                              recall_vectors=f"{base}:recall_vectors",
                              recall_version=f"{base}:recall_version",
                              recall_synced=f"{base}:recall_synced",
                              recall_members_base=f"{base}:recall_members")

    def user_pattern(self, tenant: str, user: str) -> str:
        """A SCAN pattern matching every per-user memory key of one user."""
        return f"{self.store.user_head(tenant, user)}:u:{_part(tenant)}:{_part(user)}:*"
