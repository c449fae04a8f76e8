"""JSON text of what the store keeps: stored messages, turn records, archived branches.

Messages are kept in their OpenAI shape (`Message.to_openai`), so what is stored is what a
client sent, readable by anything that reads Redis. Invariant: `decode_x(encode_x(v)) == v`
for every value the core produces (ids are stored, and equal the chained ids recomputed from
the decoded messages). Malformed text raises `CodecError`, never returns a partial value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from gateway.core.ids import ConversationKey
from gateway.core.messages import Message, StoredMessage
from gateway.core.spend import TurnUsage
from gateway.core.transcript import TurnRecord


class CodecError(ValueError):
    """Stored text that is not a valid encoding (a poison job, or a foreign write)."""


@dataclass(frozen=True, slots=True)
class ArchivedBranch:
    """Messages that were the tail of the active branch until a fork replaced them."""

    archived_at: float
    messages: tuple[StoredMessage, ...]


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _loads(text: str | bytes) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise CodecError(f"not JSON: {exc}") from exc


def _stored_to_dict(message: StoredMessage) -> dict[str, Any]:
    return {"id": message.id, "parent_id": message.parent_id,
            "message": message.message.to_openai(), "created_at": message.created_at,
            "incomplete": message.incomplete}


def _stored_from_dict(data: Any) -> StoredMessage:
    try:
        return StoredMessage(id=str(data["id"]), parent_id=data["parent_id"],
                             message=Message.from_openai(data["message"]),
                             created_at=float(data.get("created_at", 0.0)),
                             incomplete=bool(data.get("incomplete", False)))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CodecError(f"not a stored message: {exc!r}") from exc


def encode_stored(message: StoredMessage) -> str:
    return _dumps(_stored_to_dict(message))


def decode_stored(text: str | bytes) -> StoredMessage:
    return _stored_from_dict(_loads(text))


def encode_record(record: TurnRecord) -> str:
    return _dumps(record_to_dict(record))


def decode_record(text: str | bytes) -> TurnRecord:
    return record_from_dict(_loads(text))


def record_to_dict(record: TurnRecord) -> dict[str, Any]:
    """The record as a JSON-ready object (for formats that nest it, the record journal)."""
    out = {"mode": record.mode, "parent_id": record.parent_id,
           "messages": [m.to_openai() for m in record.messages],
           "created_at": record.created_at, "request_id": record.request_id,
           "incomplete_reply": record.incomplete_reply}
    if record.usage is not None:
        out["usage"] = record.usage.to_dict()
    return out


def record_from_dict(data: Any) -> TurnRecord:
    try:
        mode = data["mode"]
        if mode not in ("after", "append"):
            raise ValueError(f"unknown mode {mode!r}")
        return TurnRecord(mode=mode, parent_id=data["parent_id"],
                          messages=tuple(Message.from_openai(m) for m in data["messages"]),
                          created_at=float(data.get("created_at", 0.0)),
                          request_id=str(data.get("request_id", "")),
                          incomplete_reply=bool(data.get("incomplete_reply", False)),
                          usage=TurnUsage.from_dict(data["usage"]) if data.get("usage")
                          else None)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CodecError(f"not a turn record: {exc!r}") from exc


def encode_branch(archived_at: float, messages: Sequence[StoredMessage]) -> str:
    return _dumps({"archived_at": archived_at,
                   "messages": [_stored_to_dict(m) for m in messages]})


def decode_branch(text: str | bytes) -> ArchivedBranch:
    data = _loads(text)
    try:
        return ArchivedBranch(float(data["archived_at"]),
                              tuple(_stored_from_dict(m) for m in data["messages"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise CodecError(f"not an archived branch: {exc!r}") from exc


def encode_key(key: ConversationKey) -> str:
    return _dumps([key.tenant, key.user, key.conversation])


def decode_key(text: str | bytes) -> ConversationKey:
    data = _loads(text)
    if not (isinstance(data, list) and len(data) == 3 and all(isinstance(p, str) for p in data)):
        raise CodecError(f"not a conversation key: {text!r}")
    return ConversationKey(*data)


def json_object(raw: str | None) -> dict[str, Any] | None:
    """A stored JSON object, or None for a missing, unreadable or non-object value (callers
    skip such entries rather than fail a search)."""
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
