"""Bringing an existing history in: the messages of an import, checked, and the turn records
that put them on a stored transcript.

An import names a conversation's messages from its start, each with the time it was written.
`parse_messages` checks them (role `user` or `assistant`, text content, a time as ISO 8601 or
epoch seconds) and raises `ImportProblem` naming the field at fault. `plan_import` relates them
to the stored transcript by their chained ids (`chain_id`: the same ids a live client's turns
get): the prefix already stored is skipped, so importing the same messages again adds nothing;
the rest becomes turn records in mode "after", each following the one before — what live
requests at those times would have recorded: consecutive messages written at the same time
form one record (a request and its reply), at most `batch` messages each. A stored transcript
that differs from the import before either ends is a conflict (`ImportConflict`): an import
never forks or rewrites what is stored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Sequence

from gateway.core.messages import Message, chain
from gateway.core.transcript import TurnRecord

IMPORT_ROLES = ("user", "assistant")
MESSAGE_FIELDS = frozenset({"role", "content", "created_at", "name"})
LATEST_TIME = 253_402_300_799.0
"""The last second of the year 9999: a later time is a mistake (milliseconds sent as seconds)."""


class ImportProblem(ValueError):
    """An import that cannot be read; `param` names the field (`messages[3].created_at`)."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class ImportConflict(ValueError):
    """The stored transcript and the import differ at message `position` (0-based)."""

    def __init__(self, position: int):
        super().__init__(f"the stored conversation differs from the import at message "
                         f"{position}")
        self.position = position


@dataclass(frozen=True, slots=True)
class ImportedMessage:
    message: Message
    created_at: float
    """Seconds since the epoch (UTC)."""


@dataclass(frozen=True, slots=True)
class ImportPlan:
    known: int
    """Messages of the import already stored (its first `known`)."""
    records: tuple[TurnRecord, ...]
    """What records the rest, in order."""

    @property
    def added(self) -> int:
        return sum(len(r.messages) for r in self.records)


def parse_time(value: Any, param: str) -> float:
    """Epoch seconds of `value`: a number of seconds, or an ISO 8601 string (UTC unless it
    names an offset)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ImportProblem("A time must be epoch seconds or an ISO 8601 string.", param)
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ImportProblem(f"`{value[:64]}` is not an ISO 8601 time.", param) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        seconds = moment.timestamp()
    else:
        try:
            seconds = float(value)
        except OverflowError:  # an integer beyond any float
            seconds = math.inf
    if not math.isfinite(seconds) or not 0 <= seconds <= LATEST_TIME:
        raise ImportProblem("A time must fall between 1970 and the year 9999 (epoch seconds, "
                            "not milliseconds).", param)
    return seconds


def parse_messages(items: Any, *, limit: int) -> tuple[ImportedMessage, ...]:
    """The messages of an import body's `messages` list (1 to `limit` of them), checked."""
    if not isinstance(items, list) or not items:
        raise ImportProblem("`messages` must be a non-empty list of messages.", "messages")
    if len(items) > limit:
        raise ImportProblem(f"An import holds at most {limit} messages; split it in "
                            "several imports of the same conversation, oldest first.",
                            "messages")
    return tuple(_message(item, f"messages[{n}]") for n, item in enumerate(items))


def _message(item: Any, param: str) -> ImportedMessage:
    if not isinstance(item, dict):
        raise ImportProblem("A message must be an object with `role`, `content` and "
                            "`created_at`.", param)
    if unknown := sorted(set(item) - MESSAGE_FIELDS):
        raise ImportProblem(f"Unknown field `{unknown[0]}`; a message has "
                            f"{', '.join(sorted(MESSAGE_FIELDS))}.", f"{param}.{unknown[0]}")
    role = item.get("role")
    if role not in IMPORT_ROLES:
        raise ImportProblem(f"`role` must be one of {', '.join(IMPORT_ROLES)}.",
                            f"{param}.role")
    content = item.get("content")
    if not (isinstance(content, str) or _text_parts(content)):
        raise ImportProblem("`content` must be a string or a list of text parts "
                            "(`{\"type\": \"text\", \"text\": ...}`).", f"{param}.content")
    if "created_at" not in item:
        raise ImportProblem("`created_at` is required: when the message was written.",
                            f"{param}.created_at")
    name = item.get("name")
    if "name" in item and not (isinstance(name, str) and 0 < len(name) <= 64):
        raise ImportProblem("`name` must be a string of 1-64 characters.", f"{param}.name")
    fields = {"role": role, "content": content, **({"name": name} if "name" in item else {})}
    return ImportedMessage(Message.from_openai(fields),
                           parse_time(item["created_at"], f"{param}.created_at"))


def _text_parts(content: Any) -> bool:
    return isinstance(content, list) and bool(content) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        and set(p) == {"type", "text"} for p in content)


def plan_import(messages: Sequence[ImportedMessage], stored_ids: Sequence[str], *,
                batch: int, request_id: str = "") -> ImportPlan:
    """The records that put `messages` on a transcript whose active branch has the ids
    `stored_ids` (archived messages included, oldest first). See the module docstring."""
    if batch < 1:
        raise ValueError("batch must be positive")
    ids = [m.id for m in chain(None, [m.message for m in messages])]
    known = 0
    for mine, theirs in zip(ids, stored_ids):
        if mine != theirs:
            raise ImportConflict(known)
        known += 1
    rest = messages[known:]
    parent = ids[known - 1] if known else None
    records: list[TurnRecord] = []
    start = 0
    while start < len(rest):
        end = start + 1
        while end < len(rest) and end - start < batch \
                and rest[end].created_at == rest[start].created_at:
            end += 1
        group = tuple(m.message for m in rest[start:end])
        records.append(TurnRecord(mode="after", parent_id=parent, messages=group,
                                  created_at=rest[start].created_at, request_id=request_id))
        parent = ids[known + end - 1]
        start = end
    return ImportPlan(known, tuple(records))
