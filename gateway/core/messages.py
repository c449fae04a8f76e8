"""Chat messages as immutable values, their canonical form and their chained ids.

A `Message` keeps everything the client sent for one message, so a rewrite can hand it back
byte-for-byte: `role`, `content` (a string, a list of content parts, or None) and every other
field (`name`, `tool_calls`, `tool_call_id`, ...) in `extra`. Values are deep-frozen on the way
in (dicts become sorted tuples of pairs, lists become tuples) and thawed by `to_openai()`, so
a message can be hashed, compared and shared without anyone mutating it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
INSTRUCTION_ROLES = frozenset({"system", "developer"})


class _FrozenDict(tuple):
    """Marks a frozen mapping, so thawing can tell it from a frozen list of pairs."""

    __slots__ = ()


_ATOMS = frozenset((str, int, float, bool, type(None)))


def freeze(value: Any) -> Any:
    # Exact-type checks first: every request freezes each message it carries, and the ABC
    # check of `isinstance(x, Mapping)` costs more than the rest of the work for a string.
    kind = type(value)
    if kind in _ATOMS or kind is _FrozenDict:
        return value
    if kind is dict or isinstance(value, Mapping):
        return _FrozenDict(sorted((str(k), freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    if isinstance(value, _FrozenDict):
        return {k: thaw(v) for k, v in value}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


_NO_EXTRA = _FrozenDict()


@dataclass(frozen=True, slots=True)
class Message:
    role: str
    content: Any = None
    extra: Any = field(default_factory=lambda: _FrozenDict())

    @classmethod
    def from_openai(cls, data: Mapping[str, Any]) -> Message:
        """Build from an OpenAI message dict. Validation of roles/types is the caller's job."""
        rest = {k: v for k, v in data.items() if k != "role" and k != "content"}
        return cls(role=data["role"], content=freeze(data.get("content")),
                   extra=freeze(rest) if rest else _NO_EXTRA)

    @classmethod
    def plain(cls, role: str, content: str) -> Message:
        """`from_openai({"role": role, "content": content})`, for a string content."""
        return cls(role, content, _NO_EXTRA)

    @classmethod
    def of(cls, role: str, content: Any = None, **extra: Any) -> Message:
        return cls(role=role, content=freeze(content), extra=freeze(extra))

    def to_openai(self) -> dict[str, Any]:
        if not self.extra and type(self.content) is str:  # the common message: nothing to thaw
            return {"role": self.role, "content": self.content}
        out: dict[str, Any] = {"role": self.role}
        if self.content is not None or self.role == "assistant":
            out["content"] = thaw(self.content)
        out.update(thaw(self.extra))
        return out

    def get(self, key: str, default: Any = None) -> Any:
        for k, v in self.extra:
            if k == key:
                return thaw(v)
        return default

    def with_content(self, content: Any) -> Message:
        return Message(role=self.role, content=freeze(content), extra=self.extra)

    @property
    def text(self) -> str:
        """The message's text: the string content, or its text parts joined by newlines."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        parts = []
        for part in thaw(self.content):
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)

    @property
    def tool_call_ids(self) -> tuple[str, ...]:
        """Ids of the tool calls an assistant message makes (empty for other messages)."""
        calls = self.get("tool_calls") or []
        return tuple(c["id"] for c in calls if isinstance(c, dict) and "id" in c)

    @property
    def is_instruction(self) -> bool:
        return self.role in INSTRUCTION_ROLES

    def key(self) -> tuple[Any, ...]:
        """A hashable value equal for messages that say the same (the same rule as
        `canonical`, without encoding JSON: what reconciliation compares, per message)."""
        if not self.extra:  # most messages: role and content only (no generator to run)
            return (self.role, self.content, ())
        return (self.role, self.content,
                tuple((k, v) for k, v in self.extra if v is not None and v != ()))

    def canonical(self) -> str:
        """Stable JSON text of what the message says: messages that say the same give the same
        text. Fields that are null or an empty list are left out, as OpenAI reads them as
        absent: a client resending a reply as the SDK returned it (`"refusal": null`,
        `"annotations": []`) resends the same message."""
        data = {k: v for k, v in self.to_openai().items()
                if k in ("role", "content") or (v is not None and v != [])}
        return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def collapsed(parts: list[Any]) -> Any:
    """Content parts as a message holds them: one plain text part is the string itself (the
    form a chat client sends), so the same words compare equal whichever door or form they came
    in; any other list as it is."""
    if len(parts) == 1 and isinstance(parts[0], dict) and parts[0].keys() == {"type", "text"}:
        return parts[0]["text"]
    return parts


def chain_id(parent_id: str | None, message: Message) -> str:
    """Id of `message` stored after `parent_id`: equal content at an equal place, equal id."""
    digest = hashlib.sha256()
    digest.update((parent_id or "").encode())
    digest.update(b"\n")
    digest.update(message.canonical().encode())
    return digest.hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message in a conversation's transcript, with its chained id."""

    id: str
    parent_id: str | None
    message: Message
    created_at: float = 0.0
    incomplete: bool = False


def chain(parent_id: str | None, messages: tuple[Message, ...] | list[Message],
          created_at: float = 0.0) -> tuple[StoredMessage, ...]:
    """Give each message its chained id, the first one following `parent_id`."""
    out = []
    for m in messages:
        mid = chain_id(parent_id, m)
        out.append(StoredMessage(id=mid, parent_id=parent_id, message=m, created_at=created_at))
        parent_id = mid
    return tuple(out)
