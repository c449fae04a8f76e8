"""The user-level recall namespace's item ids and sync records, shared by the job that mirrors
conversations into it (gateway/memory/jobs/user_index.py) and the searches and recall that read
it.

A qualified id is "<conversation>/<item id>", the item id being a turn's message id or
"chunk:<id>"; conversation ids cannot hold "/", so the qualification is injective.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from gateway.memory.records.chunk_store import VECTOR_PREFIX as CHUNK_PREFIX
from gateway.store.codec import json_object

SEPARATOR = "/"


def qualified_id(conversation: str, item_id: str) -> str:
    return f"{conversation}{SEPARATOR}{item_id}"


def split_id(qualified: str) -> tuple[str, str]:
    """(conversation, item id) of a qualified id."""
    conversation, _, item = qualified.partition(SEPARATOR)
    return conversation, item


def is_chunk(qualified: str) -> bool:
    """Chunks may change under their id (a deleted chunk's text is blanked); turns never do."""
    return split_id(qualified)[1].startswith(CHUNK_PREFIX)


@dataclass(frozen=True, slots=True)
class Synced:
    version: str | None
    started_at: float
    chunks: dict[str, str] = field(default_factory=dict, compare=False)
    """Chunk item id -> fingerprint of the entry mirrored for it (`_fingerprint`): a sync
    writes again only the chunks that changed (rewriting all ~30 on every turn made the user
    namespace change, and its caches refresh, on every turn)."""

    def to_json(self) -> str:
        return json.dumps({"version": self.version, "started_at": self.started_at,
                           "chunks": self.chunks})

    @classmethod
    def parse(cls, raw: str | None) -> Synced | None:
        data = json_object(raw)
        if data is None:
            return None
        version = data.get("version")
        chunks = data.get("chunks")
        return cls(version if isinstance(version, str) else None,
                   float(data.get("started_at") or 0.0),
                   {str(k): str(v) for k, v in chunks.items()} if isinstance(chunks, dict)
                   else {})
