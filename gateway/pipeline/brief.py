"""The conversation's memory brief on the request path: read it, or make and store it at the
conversation's first request, and give the rewrite the memory that goes with it.

A brief is made for an identified user of a tenant scoped to users (`memory.scope: user`)
with `memory.brief_tokens` above 0, whose memory is on: from what recall found for the
request that makes it (the opening message, when the conversation is new) — the profile (when
it may hold what other conversations said) and the items from outside the conversation (the
user's other conversations, facts), best first (gateway/core/context/brief.py). It is stored
when the request's turn is (`persist`); a request that is not stored (a probe) gets the brief
it would have made. Later requests read the stored brief — a stateless client resending its
whole history gets the same bytes. The brief is what the request that makes it recalls from
outside the conversation, as far as its budget goes. After the history, every request — the
one that makes the brief too — is offered what it recalls from outside only when its message
asks about the past or asks about someone an item names (what the brief shows is not offered
again). Store failures fail open: the request goes on with the memory it had, the log says
why.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping

from gateway.core.context.blocks import MemoryContext, framing_for
from gateway.core.context.brief import make_brief, with_brief
from gateway.core.ids import ConversationKey
from gateway.core.recall.need import Need, memory_need, search_text
from gateway.core.recall.personal import asked_names
from gateway.core.recall.recollection import Recollection
from gateway.core.text.tokens import Tokenizer
from gateway.memory.recall.service import MemorySnapshot, RecallSettings, reads_user_memory
from gateway.memory.records.brief_store import BriefStore, StoredBrief
from gateway.memory.records.keys import MemoryKeySpace
from gateway.memory.records.user_recall import SEPARATOR
from gateway.ops.observability import RequestLog

if TYPE_CHECKING:
    from gateway.config import Config
    from gateway.store.redis_store import RedisStore

logger = logging.getLogger("gateway.pipeline")


class Briefs:
    def __init__(self, store: BriefStore, budgets: Mapping[str, int], *,
                 clock: Callable[[], float] = time.time) -> None:
        """`budgets`: each tenant's `memory.brief_tokens` (absent: no brief)."""
        self.store = store
        self.budgets = budgets
        self.clock = clock

    def budget(self, key: ConversationKey, settings: RecallSettings | None) -> int:
        """The conversation's brief budget (0: it has no brief)."""
        if settings is None or not reads_user_memory(key, settings):
            return 0
        return self.budgets.get(key.tenant, 0)

    async def apply(self, key: ConversationKey, settings: RecallSettings | None,
                    memory: MemoryContext, query: str,
                    snapshot: MemorySnapshot | BaseException | None, persist: bool,
                    tokenizer: Tokenizer, log: RequestLog) -> MemoryContext:
        """`memory` with the conversation's brief (`core.context.brief.with_brief`); `memory`
        as it is when the conversation has none (see the module docstring)."""
        budget = self.budget(key, settings)
        if budget <= 0 or not isinstance(snapshot, MemorySnapshot) or not snapshot.memory:
            return memory
        log.brief_tokens = 0
        try:
            stored = await self.store.get(key)
            if stored is None or stored.budget != budget:
                profile = memory.profile if memory.profile_elsewhere else None
                brief = make_brief(profile, [r for r in memory.recalled if outside(r)], budget,
                                   tokenizer, framing_for([query]))
                stored = StoredBrief(brief, budget, self.clock())
                # The request's start: the memory the brief is made from was read after it.
                read_at = self.clock() - (time.perf_counter() - log.started)
                if persist and not await self.store.put(key, stored, read_at=read_at):
                    logger.info("memory brief of request %s not stored: the user was erased "
                                "or the conversation deleted meanwhile", log.request_id)
        except Exception as exc:  # noqa: BLE001 — the brief fails open, logged
            logger.warning("memory brief unavailable for request %s: %r", log.request_id, exc)
            log.memory_error = repr(exc)
            return memory
        # The request that makes the brief is no exception: what did not fit the brief is
        # offered after the history when the message asks about the past or names someone.
        need = snapshot.need if snapshot.query == query else memory_need(query)
        return with_brief(memory, stored.brief, asks_past=need is Need.PAST, outside=outside,
                          names=asked_names(search_text(query)))


def outside(item: Recollection) -> bool:
    """Whether a recalled item comes from outside the conversation: a fact about the user, or
    an item of the user's recall index (its id names its conversation)."""
    return item.kind == "fact" or SEPARATOR in item.id


def serving_briefs(config: Config, redis: Any, store: RedisStore) -> Briefs:
    """The serving processes' briefs: in the store's key space, sealed with its keys, each
    tenant's `memory.brief_tokens` (tenants scoped to conversations have none)."""
    return Briefs(BriefStore(redis, MemoryKeySpace(store.keys), encryption=store.encryption),
                  {name: t.memory.brief_tokens for name, t in config.tenants.items()
                   if t.memory.enabled and t.memory.scope == "user"})
