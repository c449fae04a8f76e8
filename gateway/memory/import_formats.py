"""Reading history files into import messages (`gateway import`): ChatGPT's export and the
LoCoMo schema. Pure: data in (the parsed JSON), conversations out, each message a dict in the
import API's form (`role`, `content`, `created_at`) that `parse_messages` then checks the way
the endpoint does. A file that cannot be read raises `ImportProblem` naming where.

ChatGPT (`conversations.json`): a list of conversations, each a `mapping` of nodes (a tree:
`parent`, `children`, `message` with `author.role`, `content.parts`, `create_time`). Only the
active branch is read — from `current_node` back to the root — so an edited or regenerated
message's older versions are left out. Kept: the user's and the assistant's text messages
addressed to everyone (`recipient` "all"), not hidden; tool calls, tool output and system
messages are not. A message without a time takes the one before it (the conversation's
`create_time` for the first).

LoCoMo: a list of samples, each `{sample_id, conversation: {speaker_a, speaker_b,
session_<n>_date_time, session_<n>: [{speaker, text, blip_caption?}]}}`. `speaker_a` is the
user, anyone else the assistant; a turn is `<speaker>: <text>` (a photo's caption after it, as
` [shares a photo: <caption>]`); its time is its session's date plus one second per turn
before it in the session, so the order survives. Session dates are read in LoCoMo's form
(`1:56 pm on 8 May, 2023`), LongMemEval's (`2023/05/20 (Sat) 02:21`) or ISO 8601.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from gateway.core.history_import import ImportProblem, parse_time
from gateway.core.ids import valid_id

FORMATS = ("chatgpt", "locomo")
SESSION_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%Y/%m/%d (%a) %H:%M", "%Y/%m/%d %H:%M")
_SESSION_KEY = re.compile(r"session_(\d+)")


@dataclass(frozen=True, slots=True)
class FileConversation:
    id: str
    """The conversation's id in the file (a valid gateway id, or its place: `conversation-3`)."""
    title: str
    messages: tuple[dict[str, Any], ...]


def read_history(data: Any, format: str) -> list[FileConversation]:
    """The conversations of a parsed history file in `format` (one of FORMATS)."""
    if format == "chatgpt":
        return chatgpt_conversations(data)
    if format == "locomo":
        return locomo_conversations(data)
    raise ImportProblem(f"unknown format {format!r}; known: {', '.join(FORMATS)}", "format")


def guess_format(data: Any) -> str:
    """`chatgpt` for a list of conversations with a `mapping`, else `locomo`."""
    first = data[0] if isinstance(data, list) and data else data
    return "chatgpt" if isinstance(first, dict) and "mapping" in first else "locomo"


def _file_id(raw: Any, n: int) -> str:
    text = str(raw) if raw is not None else ""
    return text if valid_id(text) else f"conversation-{n}"


# -- ChatGPT -----------------------------------------------------------------------------------

def chatgpt_conversations(data: Any) -> list[FileConversation]:
    items = [data] if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise ImportProblem("a ChatGPT export is a list of conversations", "")
    return [_chatgpt(item, n) for n, item in enumerate(items)]


def _chatgpt(item: Any, n: int) -> FileConversation:
    where = f"[{n}]"
    if not isinstance(item, dict) or not isinstance(item.get("mapping"), dict):
        raise ImportProblem("a conversation has a `mapping` of message nodes", where)
    mapping = item["mapping"]
    branch: list[dict[str, Any]] = []
    node, seen = item.get("current_node"), set()
    if node is None:  # an export without it: the last node the mapping lists
        node = next(reversed(mapping), None)
    while node is not None:
        if node in seen or node not in mapping or not isinstance(mapping[node], dict):
            raise ImportProblem(f"node {str(node)[:64]!r} is missing or part of a cycle",
                                f"{where}.mapping")
        seen.add(node)
        branch.append(mapping[node])
        node = mapping[node].get("parent")
    messages: list[dict[str, Any]] = []
    last = item.get("create_time")
    for entry in reversed(branch):
        kept = _chatgpt_message(entry.get("message"))
        if kept is None:
            continue
        role, text, created = kept
        created = created if created is not None else last
        if created is None:
            raise ImportProblem("a message without `create_time` and no time before it",
                                f"{where}.mapping")
        messages.append({"role": role, "content": text,
                         "created_at": parse_time(created, f"{where}.create_time")})
        last = created
    return FileConversation(_file_id(item.get("conversation_id") or item.get("id"), n),
                            str(item.get("title") or ""), tuple(messages))


def _chatgpt_message(message: Any) -> tuple[str, str, Any] | None:
    """(role, text, create_time) of a message to keep, or None."""
    if not isinstance(message, dict):
        return None
    role = (message.get("author") or {}).get("role")
    content = message.get("content") or {}
    metadata = message.get("metadata") or {}
    if role not in ("user", "assistant") or message.get("recipient", "all") != "all" \
            or metadata.get("is_visually_hidden_from_conversation") \
            or content.get("content_type") not in ("text", "multimodal_text"):
        return None
    text = "\n".join(p for p in content.get("parts") or [] if isinstance(p, str))
    if not text.strip():
        return None
    return role, text, message.get("create_time")


# -- LoCoMo ------------------------------------------------------------------------------------

def locomo_conversations(data: Any) -> list[FileConversation]:
    if not isinstance(data, list):
        raise ImportProblem("a LoCoMo file is a list of samples", "")
    return [_locomo(item, n) for n, item in enumerate(data)]


def _locomo(item: Any, n: int) -> FileConversation:
    where = f"[{n}].conversation"
    raw = item.get("conversation") if isinstance(item, dict) else None
    if not isinstance(raw, dict) or "speaker_a" not in raw:
        raise ImportProblem("a sample has a `conversation` with `speaker_a`", where)
    numbers = sorted(int(m[1]) for key in raw if (m := _SESSION_KEY.fullmatch(key)))
    messages: list[dict[str, Any]] = []
    for number in numbers:
        turns = raw[f"session_{number}"] or []
        if not turns:
            continue
        date_key = f"session_{number}_date_time"
        start = session_time(raw.get(date_key), f"{where}.{date_key}")
        for k, turn in enumerate(turns):
            if not isinstance(turn, dict) or "speaker" not in turn:
                raise ImportProblem("a turn has a `speaker` and a `text`",
                                    f"{where}.session_{number}[{k}]")
            speaker = str(turn["speaker"])
            caption = turn.get("blip_caption")
            photo = f" [shares a photo: {caption}]" if caption else ""
            messages.append({"role": "user" if speaker == raw["speaker_a"] else "assistant",
                             "content": f"{speaker}: {turn.get('text', '')}{photo}",
                             "created_at": start + k})
    return FileConversation(_file_id(item.get("sample_id"), n), "", tuple(messages))


def session_time(value: Any, param: str) -> float:
    """Epoch seconds (UTC) of a session date in one of the forms the module docstring names."""
    text = str(value or "").strip()
    for form in SESSION_DATE_FORMATS:
        try:
            return datetime.strptime(text, form).replace(tzinfo=timezone.utc).timestamp()
        except ValueError:
            continue
    if not text:
        raise ImportProblem("a session without a date", param)
    return parse_time(text, param)
