"""What the memory worker learns about a user from newly applied messages: facts and profile.

Invariants:
- only user messages teach anything, and only their redacted text reaches the extractor, the
  fact store and the profile (the transcript keeps the verbatim text); a one-shot placeholder
  teaches nothing and is not shown to the extractor, nor is a tool result;
- processing the same messages twice changes nothing the second time: facts upsert by key and
  an update whose source ids a fact has already seen is a replay (core.facts.upsert); the
  profile only moves on evidence, and the same evidence leads to the same profile;
- with `auto_extract` off nothing is learned (the user switched automatic memory off).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from gateway.core.ids import ConversationKey
from gateway.core.memory.content import has_content
from gateway.core.messages import Message, StoredMessage
from gateway.core.text.pii import redact
from gateway.core.memory.profile import update_profile
from gateway.memory.jobs.extractor import LlmFactExtractor, extract_facts
from gateway.memory.records.facts_store import FactStore
from gateway.memory.records.profile_store import ProfileStore
from gateway.memory.records.writes import Writes

CONTEXT_MESSAGES = 4
"""Messages before the new ones shown to the LLM extractor (an answer needs its question)."""


@dataclass(frozen=True, slots=True)
class KnowledgeResult:
    facts_written: int = 0
    profile_changed: bool = False


def redacted(stored: StoredMessage) -> StoredMessage:
    """`stored` with its text redacted, as plain text content (same id, parent and time)."""
    text = stored.message.text
    clean = redact(text)
    if clean == text and (stored.message.content is None or isinstance(stored.message.content,
                                                                       str)):
        return stored
    return replace(stored, message=Message.of(stored.message.role, clean))


class KnowledgeProcessor:
    def __init__(self, fact_store: FactStore, profile_store: ProfileStore,
                 extractor: LlmFactExtractor | None, clock: Callable[[], float]) -> None:
        self.facts = fact_store
        self.profiles = profile_store
        self.extractor = extractor
        self.clock = clock

    async def process(self, key: ConversationKey, transcript: tuple[StoredMessage, ...],
                      new: tuple[StoredMessage, ...], auto_extract: bool, *,
                      writes: Writes | None = None) -> KnowledgeResult:
        """Learn from `new` (messages just applied to the transcript of `key`). `writes`:
        whose transactions store facts and profile (the memory job's fence; default:
        the stores' direct ones)."""
        if not auto_extract:
            return KnowledgeResult()
        # The assistant's replies among the new messages are context for the LLM too; each
        # message is redacted once (a PII scan of a long message is the costly part).
        batch = tuple(redacted(m) for m in new if _shown(m))
        learnable = tuple(m for m in batch if m.message.role == "user")
        if not learnable:
            return KnowledgeResult()
        new_ids = {m.id for m in new}
        first = next((i for i, m in enumerate(transcript) if m.id in new_ids), len(transcript))
        context = tuple(redacted(m) for m in transcript[max(0, first - CONTEXT_MESSAGES):first]
                        if has_content(m.message))
        facts = await extract_facts(batch, self.extractor, context)
        written = await self.facts.upsert(key.tenant, key.user, facts, now=self.clock(),
                                          writes=writes)
        before = await self.profiles.get(key.tenant, key.user)
        after = update_profile(before, learnable)
        if after != before:
            await self.profiles.put(key.tenant, key.user, after, writes=writes)
        return KnowledgeResult(facts_written=len(written), profile_changed=after != before)


def _shown(stored: StoredMessage) -> bool:
    """Whether a new message goes to the extractor: a complete user or assistant message
    with content (not a one-shot placeholder, not a tool-call-only assistant message)."""
    return (not stored.incomplete and stored.message.role in ("user", "assistant")
            and has_content(stored.message))
