"""The JSON shapes in which the memory API, the console and the export show what is stored of
a user: messages, their sources, conversations, facts and summary chunks (pins, topics and
briefs are rendered beside their stores, gateway/memory/records/)."""

from __future__ import annotations

from typing import Any, Iterable

from gateway.core.memory.compaction import SummaryChunk
from gateway.core.memory.facts import Fact
from gateway.core.messages import StoredMessage

Json = dict[str, Any]


def message_json(message: StoredMessage) -> Json:
    """A stored message as the API shows it: its id and place, and the message as sent."""
    return {"id": message.id, "parent_id": message.parent_id,
            "created_at": message.created_at, "incomplete": message.incomplete,
            "message": message.message.to_openai()}


def source_json(conversation: str, message: StoredMessage) -> Json:
    return {"conversation": conversation, "id": message.id, "role": message.message.role,
            "content": message.message.to_openai().get("content")}


def conversation_json(conversation: str, meta: dict[str, str]) -> Json:
    def number(name: str) -> float | None:
        return float(meta[name]) if name in meta else None
    return {"object": "memory.conversation", "id": conversation,
            "message_count": int(meta.get("message_count", 0)),
            "created_at": number("created_at"), "updated_at": number("updated_at")}


def _resolved(ids: Iterable[str], messages: dict[str, Json]) -> list[Json]:
    """The source messages still stored (a deleted conversation's are gone), in id order."""
    return [messages[i] for i in ids if i in messages]


def fact_json(fact: Fact, messages: dict[str, Json]) -> Json:
    return {"object": "memory.fact", **fact.to_dict(),
            "sources": _resolved(fact.source_ids, messages)}


def chunk_json(chunk: SummaryChunk, messages: dict[str, Json]) -> Json:
    return {"object": "memory.chunk", "id": chunk.id, "text": chunk.text,
            "deleted": chunk.deleted, "first_position": chunk.first_position,
            "last_position": chunk.last_position, "start_date": chunk.start_date,
            "end_date": chunk.end_date, "created_at": chunk.created_at, "method": chunk.method,
            "source_ids": list(chunk.source_ids),
            "sources": _resolved(chunk.source_ids, messages)}
