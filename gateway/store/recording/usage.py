"""Usage counters per tenant, user and conversation: written by the recorder, read by the
user-control API.

Each recorded turn carries its request's counters (`core.spend.TurnUsage`); the recorder adds
them (HINCRBY) in the same transaction that applies the turn, so they count every applied turn
exactly once — a duplicate job adds nothing — and cost the request path nothing (no store
call of their own). Three hashes get the same increments: the conversation's, the user's and
the tenant's (one per shard in a cluster: the user's, summed when read). Money is in integer
nano-units (`core.spend.NANO`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from gateway.core.ids import ConversationKey
from gateway.core.spend import TurnUsage, money
from gateway.store.keys import KeySpace

COUNTERS = ("requests", "requests_priced", "requests_unpriced", "requests_without_usage",
            "tokens_original", "tokens_forwarded", "tokens_prompt", "tokens_cached",
            "tokens_cache_write", "tokens_completion", "spend_nano", "whole_cost_nano")


def usage_keys(keys: KeySpace, key: ConversationKey) -> tuple[str, str, str]:
    """The conversation's, the user's and the tenant's (the user's shard) counters."""
    return (keys.conversation_usage(key), keys.user_usage(key.tenant, key.user),
            keys.tenant_usage_at(keys.shard_of(key.tenant, key.user), key.tenant))


def queue_usage(pipe: Any, keys: KeySpace, key: ConversationKey, usage: TurnUsage) -> None:
    """Queue the turn's increments on `pipe` (inside the recorder's MULTI)."""
    increments = {k: v for k, v in usage.counters().items() if v}
    for name in usage_keys(keys, key):
        for field, value in increments.items():
            pipe.hincrby(name, field, value)


@dataclass(frozen=True, slots=True)
class UsageTotals:
    counters: Mapping[str, int]

    def as_json(self) -> dict[str, Any]:
        """The API's form: tokens and requests, and money in the currency (null while no
        request was priced)."""
        c = self.counters
        priced = c.get("requests_priced", 0)
        return {
            "requests": c.get("requests", 0), "requests_priced": priced,
            "requests_unpriced": c.get("requests_unpriced", 0),
            "requests_without_usage": c.get("requests_without_usage", 0),
            "tokens": {"original": c.get("tokens_original", 0),
                       "forwarded": c.get("tokens_forwarded", 0),
                       "prompt": c.get("tokens_prompt", 0),
                       "cached": c.get("tokens_cached", 0),
                       "cache_write": c.get("tokens_cache_write", 0),
                       "completion": c.get("tokens_completion", 0)},
            "spend": money(c.get("spend_nano", 0)) if priced else None,
            "whole_history_cost": money(c.get("whole_cost_nano", 0)) if priced else None,
        }


def totals(*hashes: Mapping[str, Any]) -> UsageTotals:
    """The counters of one or more hashes (HGETALL answers) added up."""
    out = dict.fromkeys(COUNTERS, 0)
    for data in hashes:
        for field, value in data.items():
            name = field.decode() if isinstance(field, bytes) else str(field)
            if name in out:
                out[name] += int(value)
    return UsageTotals(out)


class UsageCounters:
    """Reads the counters (one call per hash)."""

    def __init__(self, redis: Any, keys: KeySpace) -> None:
        self.redis = redis
        self.keys = keys

    async def conversation(self, key: ConversationKey) -> UsageTotals:
        return totals(await self.redis.hgetall(self.keys.conversation_usage(key)))

    async def user(self, tenant: str, user: str) -> UsageTotals:
        return totals(await self.redis.hgetall(self.keys.user_usage(tenant, user)))

    async def tenant(self, tenant: str) -> UsageTotals:
        return totals(*[await self.redis.hgetall(self.keys.tenant_usage_at(shard, tenant))
                        for shard in self.keys.shard_ids()])
