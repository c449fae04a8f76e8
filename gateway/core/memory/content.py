"""What of a stored message memory may keep: its content, not placeholders, and tool output
only where the tenant allows it.

Agent sessions record tool results (`tool` messages, the legacy `function` ones) and the
placeholders of one-shot messages (gateway/core/one_shot.py). A placeholder says nothing of the
message it stands for: no memory layer keeps it (turn index, summaries, facts, profile, topics,
pins). A tool result is the conversation's working material, not something the user said: it
stays recallable within its conversation, and reaches the user's memory of their other
conversations (the user recall index, and the summary chunks mirrored into it) only with the
tenant's `memory.recall_tool_results` (docs/memory.md, "Tool output is not user memory").
"""

from __future__ import annotations

from gateway.core.messages import Message
from gateway.core.one_shot import is_placeholder

TOOL_ROLES = frozenset({"tool", "function"})


def has_content(message: Message) -> bool:
    """Whether memory may keep `message`'s text: not an instruction (the client resends its
    own), not blank (an assistant message that only calls tools), not a one-shot
    placeholder."""
    if message.is_instruction:
        return False
    text = message.text
    return bool(text.strip()) and not is_placeholder(text)


def is_indexed_placeholder(text: str) -> bool:
    """Whether a recall entry's text — `[anchor date] text` when dated — is a one-shot
    placeholder: indexes written before placeholders were left out may hold some, and recall
    leaves them out as it reads them."""
    if not text.endswith("not stored]"):  # most texts: one comparison
        return False
    if is_placeholder(text):
        return True
    anchor, found, rest = text.partition("] ")
    return bool(found) and anchor.startswith("[") and is_placeholder(rest)


def is_tool_result(message: Message) -> bool:
    """Whether `message` is a tool's output (a `tool` or `function` message)."""
    return message.role in TOOL_ROLES
