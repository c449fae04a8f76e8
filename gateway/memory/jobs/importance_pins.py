"""The memory worker's pinning step: user messages the importance rule picks are pinned.

Runs on the messages the worker has not processed before (`MemoryUpdate.new`), so each message
is judged once (a retried run judges it again: pinning is idempotent). The rule reads the
PII-redacted text and the pin stores, redacted as every other memory layer stores, what made
the message important (`important_part`: the message itself when all of it did, else those
sentences as text); the verbatim message stays in the transcript only. It is an automatic
derivation like facts: a user's `auto_extract: false` switches it off.
"""

from __future__ import annotations

from gateway.core.memory.content import has_content
from gateway.core.memory.importance import important_part
from gateway.core.context.blocks import PinnedMessage
from gateway.core.messages import Message, StoredMessage, thaw
from gateway.core.text.pii import redact
from gateway.memory.records.pin_store import PinStore
from gateway.memory.jobs.worker import MemoryUpdate


class ImportancePinner:
    name = "pins"

    def __init__(self, pins: PinStore) -> None:
        self.pins = pins

    async def process(self, update: MemoryUpdate) -> None:
        if not update.settings.auto_extract:
            return
        picked = tuple(p for m in update.new if (p := rule_pin(m)) is not None)
        await self.pins.pin_by_rule(update.key, picked, writes=update.writes)


def rule_pin(stored: StoredMessage) -> PinnedMessage | None:
    """The pin the rule makes of a stored message (None: not a user message, a one-shot
    placeholder, or not important)."""
    message = stored.message
    if message.role != "user" or stored.incomplete or not has_content(message):
        return None
    redacted = _redacted(message)
    part = important_part(redacted.text)
    if part is None:
        return None
    kept = redacted if part == redacted.text.strip() else Message.of("user", part)
    return PinnedMessage(stored.id, kept, "rule", stored.created_at)


def _redacted(message: Message) -> Message:
    content = message.content
    if isinstance(content, str):
        return message.with_content(redact(content))
    if content is None:
        return message
    parts = [{**p, "text": redact(p["text"])}
             if isinstance(p, dict) and isinstance(p.get("text"), str) else p
             for p in thaw(content)]
    return message.with_content(parts)
