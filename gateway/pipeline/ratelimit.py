"""Per-tenant and per-key rate limits (requests and tokens per minute), counted in the store.

The algorithm is a **sliding-window log at one-second resolution**: each limit is one Redis
hash, field = unix second (the store's clock, `TIME`, so replicas with skewed clocks agree),
value = what was admitted in that second. A request is admitted when, for every limit that
applies to it, what was admitted in the last 60 seconds (this second and the 59 before) plus
its own cost stays within the limit — so at most `limit` per any 60-second window, with no
boundary burst (a fixed window admits up to 2x across a boundary) and no refill before a
minute has passed (a token bucket with a minute-sized burst admits burst + rate). The check
and the count are one Lua script: atomic across replicas, one round trip.

Invariants:
- no limit configured for a request: no store call at all (`RateLimiter.limits_for` is a
  dict lookup returning an empty tuple);
- a rejected request is counted nowhere: all of a request's limits are checked before any
  is incremented;
- tokens are counted as forwarded upstream (after the rewrite) at admission; completion
  tokens are only known with the answer and are added then (`settle`), to the second they
  arrive in: they can take a window over its limit, which delays the next requests;
- the store unavailable: the request is admitted (fail open) and the log says why.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from gateway.errors import RateLimited

if TYPE_CHECKING:
    import redis.asyncio as redis

    from gateway.config import Config, RateLimitsConfig
    from gateway.ops.observability import Metrics
    from gateway.store.keys import KeySpace

logger = logging.getLogger("gateway.ratelimit")

WINDOW_SECONDS = 60

# KEYS: one hash per limit. ARGV: window, then per key: limit, cost.
# Returns {1} when admitted (and counted), else {0, index of the limit that waits longest
# (1-based), what it had used, seconds to wait (-1: the cost alone exceeds the limit)}.
_ADMIT_LUA = """
local now = tonumber(redis.call('TIME')[1])
local window = tonumber(ARGV[1])
local oldest = now - window + 1
local worst_wait, worst_index, worst_used = 0, 0, 0
for i, key in ipairs(KEYS) do
  local limit, cost = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
  local flat = redis.call('HGETALL', key)
  local used, stale, live = 0, {}, {}
  for j = 1, #flat, 2 do
    local second, count = tonumber(flat[j]), tonumber(flat[j + 1])
    if second < oldest then
      stale[#stale + 1] = flat[j]
    else
      used = used + count
      live[#live + 1] = {second, count}
    end
  end
  if #stale > 0 then redis.call('HDEL', key, unpack(stale)) end
  if used + cost > limit then
    local wait = -1
    if cost <= limit then
      table.sort(live, function(a, b) return a[1] < b[1] end)
      local excess = used + cost - limit
      for _, entry in ipairs(live) do
        excess = excess - entry[2]
        if excess <= 0 then
          wait = entry[1] + window - now
          break
        end
      end
    end
    if worst_index == 0 or wait == -1 or (worst_wait ~= -1 and wait > worst_wait) then
      worst_wait, worst_index, worst_used = wait, i, used
    end
  end
end
if worst_index > 0 then return {0, worst_index, worst_used, worst_wait} end
for i, key in ipairs(KEYS) do
  local cost = tonumber(ARGV[2 * i + 1])
  if cost > 0 then
    redis.call('HINCRBY', key, now, cost)
    redis.call('EXPIRE', key, window + 1)
  end
end
return {1}
"""

# KEYS: token limits. ARGV: window, tokens. Counted in the current second, unchecked.
_SETTLE_LUA = """
local now = redis.call('TIME')[1]
for _, key in ipairs(KEYS) do
  redis.call('HINCRBY', key, now, ARGV[2])
  redis.call('EXPIRE', key, tonumber(ARGV[1]) + 1)
end
return 1
"""


@dataclass(frozen=True, slots=True)
class Limit:
    """One limit that applies to a request: its hash in the store, and what it allows."""

    key: str
    kind: Literal["requests", "tokens"]
    scope: str
    """Who shares it, for the client's message: `tenant acme` or `this API key`."""
    per_minute: int


class RateLimiter:
    """Admits requests against their limits and settles completion tokens; built once per
    process from the config (limits change with a restart)."""

    def __init__(self, config: Config, redis: redis.Redis, keys: KeySpace, metrics: Metrics):
        self._redis = redis
        self._metrics = metrics
        self._admit = redis.register_script(_ADMIT_LUA)
        self._settle = redis.register_script(_SETTLE_LUA)
        self._limits: dict[tuple[str, str], tuple[Limit, ...]] = {}
        for name, tenant in config.tenants.items():
            shared = _limits(keys, name, "tenant", f"tenant {name}", tenant.rate_limits)
            for i, api_key in enumerate(tenant.api_keys):
                digest = api_key.digest(f"tenants.{name}.api_keys.{i}")
                own = _limits(keys, name, f"key:{digest[:16]}", "this API key", api_key.rate_limits)
                if shared or own:
                    self._limits[(name, digest)] = shared + own

    def limits_for(self, tenant: str, key_digest: str) -> tuple[Limit, ...]:
        """The limits of a request made with this key (empty: none, and no store call)."""
        return self._limits.get((tenant, key_digest), ())

    async def admit(self, limits: tuple[Limit, ...], tenant: str, tokens: int) -> None:
        """Count the request against every limit, or raise RateLimited counting nothing."""
        if not limits:
            return
        args: list[int] = [WINDOW_SECONDS]
        for limit in limits:
            args += [limit.per_minute, 1 if limit.kind == "requests" else tokens]
        try:
            answer = await self._admit(keys=[limit.key for limit in limits], args=args)
        except Exception as exc:  # noqa: BLE001 — limits fail open, logged
            self._metrics.store_unavailable.labels("rate_limit").inc()
            logger.warning("rate limits unavailable, admitting the request: %r", exc)
            return
        if int(answer[0]) == 1:
            return
        limit = limits[int(answer[1]) - 1]
        used, wait = int(answer[2]), int(answer[3])
        cost = 1 if limit.kind == "requests" else tokens
        self._metrics.rate_limited.labels(tenant, limit.kind).inc()
        raise _rejection(limit, used, cost, wait)

    async def settle(self, limits: tuple[Limit, ...], completion_tokens: int) -> None:
        """Add a request's completion tokens to its token limits (after the answer)."""
        token_keys = [limit.key for limit in limits if limit.kind == "tokens"]
        if not token_keys or completion_tokens <= 0:
            return
        try:
            await self._settle(keys=token_keys, args=[WINDOW_SECONDS, completion_tokens])
        except Exception as exc:  # noqa: BLE001 — the answer is sent; the log says why
            self._metrics.store_unavailable.labels("rate_limit").inc()
            logger.warning("completion tokens not counted against the rate limit: %r", exc)


def _limits(keys: KeySpace, tenant: str, scope: str, who: str,
            config: RateLimitsConfig) -> tuple[Limit, ...]:
    out = []
    if config.requests_per_minute is not None:
        out.append(Limit(keys.rate_limit(tenant, scope, "requests"), "requests", who,
                         config.requests_per_minute))
    if config.tokens_per_minute is not None:
        out.append(Limit(keys.rate_limit(tenant, scope, "tokens"), "tokens", who,
                         config.tokens_per_minute))
    return tuple(out)


def _rejection(limit: Limit, used: int, cost: int, wait: int) -> RateLimited:
    """OpenAI's wording and shape: type `requests` or `tokens`, code `rate_limit_exceeded`."""
    unit = "requests per min (RPM)" if limit.kind == "requests" else "tokens per min (TPM)"
    if wait < 0:
        return RateLimited(f"Request too large for {limit.scope} on {unit}: Limit "
                           f"{limit.per_minute}, Requested {cost}. The input or output tokens "
                           "must be reduced in order to run successfully.", kind=limit.kind)
    wait = max(1, wait)
    return RateLimited(f"Rate limit reached for {limit.scope} on {unit}: Limit "
                       f"{limit.per_minute}, Used {used}, Requested {cost}. Please try again "
                       f"in {wait}s.", kind=limit.kind, retry_after=wait)
