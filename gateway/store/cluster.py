"""Redis Cluster as the store: the client, the key space, and commands every primary must run.

A cluster client (`redis.asyncio.cluster.RedisCluster`) routes each keyed command to the node
holding its slot; a multi-key command, script or MULTI/EXEC must stay in one slot, which the
key space's hash tags guarantee (gateway/store/keys.py). Commands about a node rather than a
key (INFO, BGREWRITEAOF, FLUSHDB) go to one node by default: `primary_targets` sends them
to every primary. SCAN (`scan_iter`) already visits every primary in redis-py's cluster client.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import TYPE_CHECKING, Any, AsyncIterator

from redis.asyncio.cluster import ClusterPipeline, RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException

from gateway.store.keys import MAX_SHARDS, KeySpace
from gateway.store.pool import PoolStats

if TYPE_CHECKING:
    from gateway.config import Config


def key_space(config: Config) -> KeySpace:
    """The key space of the configured store: sharded with hash tags for a cluster only."""
    cluster = config.store_cluster
    return KeySpace(shards=cluster.shards if cluster.enabled else 0)


def connect_cluster(url: str, *, max_connections: int, pool_timeout: float,
                    **options: Any) -> StoreCluster:
    """A cluster client from the URL of any node; the others are discovered from it.

    At most `max_connections` commands and pipelines are in flight at once (`CommandGate`),
    so no node ever needs more connections than it has: a call beyond them waits up to
    `pool_timeout` seconds, like the one-Redis pool (gateway/store/pool.py), instead of
    failing at once with redis-py's `MaxConnectionsError`."""
    options.setdefault("decode_responses", True)
    # Blocking stream reads (one per shard's recorder) pass outside the gate: each node may
    # hold those besides the gated calls.
    client = StoreCluster.from_url(url, max_connections=max_connections + MAX_SHARDS,
                                   gate=CommandGate(max_connections, pool_timeout), **options)
    _drop_routing_keys(client.response_callbacks)
    return client


class CommandGate:
    """Bounds the commands and pipelines a cluster client has in flight, waiting (up to
    `timeout`) for a free place, and counts like `StorePool` for /readyz and /metrics.

    redis-py's cluster nodes fail a call at once when all their connections are in use; each
    command or pipeline in flight holds at most one connection per node, so with at most
    `max_connections` in flight no node runs out. Blocking stream reads (a recorder per shard,
    waiting up to its BLOCK time) pass outside the gate — each node allows `MAX_SHARDS` more
    connections for them. (A transaction that WATCHes holds its connection between its calls:
    a node could still run out with every place taken by such transactions — the store's
    transactions are short and never wait for each other.)"""

    def __init__(self, max_connections: int, timeout: float):
        self.max_connections = max_connections
        self.timeout = timeout
        self._places = asyncio.Semaphore(max_connections)
        self.in_use = 0
        self.waits = 0
        self.timeouts = 0

    @contextlib.asynccontextmanager
    async def place(self) -> AsyncIterator[None]:
        if self._places.locked():
            self.waits += 1
        try:
            async with asyncio.timeout(self.timeout):
                await self._places.acquire()
        except TimeoutError:
            self.timeouts += 1
            raise RedisConnectionError(f"no free store connection within {self.timeout} s "
                                       f"({self.max_connections} in use)") from None
        self.in_use += 1
        try:
            yield
        finally:
            self.in_use -= 1
            self._places.release()

    def stats(self) -> PoolStats:
        return PoolStats(self.max_connections, self.in_use, self.max_connections - self.in_use,
                         self.waits, self.timeouts)


class StoreCluster(RedisCluster):
    """`RedisCluster` whose commands and pipelines pass a `CommandGate`, and that finds the
    slot of a stream read without asking the server.

    redis-py asks a node (COMMAND GETKEYS, a round trip) for the keys of every command whose
    keys move (XREADGROUP among them): that doubled the commands a recorder sends. The keys of
    XREADGROUP/XREAD are the first half of what follows STREAMS; every other command is
    routed as redis-py does it."""

    def __init__(self, *args: Any, gate: CommandGate | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.gate = gate or CommandGate(kwargs.get("max_connections", 100), 20.0)

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        if _blocking_read(args):
            # A recorder's read waits up to its BLOCK time for new entries: it must not hold
            # one of the places the requests' calls wait for.
            return await super().execute_command(*args, **kwargs)
        async with self.gate.place():
            return await super().execute_command(*args, **kwargs)

    def pipeline(self, transaction: Any | None = None,
                 shard_hint: Any | None = None) -> GatedPipeline:
        if shard_hint:
            raise RedisClusterException("shard_hint is deprecated in cluster mode")
        return GatedPipeline(self, transaction)


class GatedPipeline(ClusterPipeline):
    """A cluster pipeline (or transaction) whose execution passes its client's gate."""

    cluster_client: StoreCluster

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        async with self.cluster_client.gate.place():
            return await super().execute(*args, **kwargs)

    async def _determine_slot(self, command: str, *args: Any) -> int:
        if _text(command).upper() in ("XREADGROUP", "XREAD"):
            upper = [_text(a).upper() for a in args]  # redis-py sends STREAMS as bytes
            if "STREAMS" in upper:
                after = args[upper.index("STREAMS") + 1:]
                keys = after[:len(after) // 2]
                slots = {self.keyslot(key) for key in keys}
                if len(slots) == 1:
                    return slots.pop()
        return await super()._determine_slot(command, *args)


def _blocking_read(args: tuple[Any, ...]) -> bool:
    return bool(args) and _text(args[0]).upper() in ("XREADGROUP", "XREAD") \
        and any(_text(a).upper() == "BLOCK" for a in args[1:])


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _drop_routing_keys(callbacks: dict[Any, Any]) -> None:
    """redis-py 8.1's cluster MULTI/EXEC hands the `keys` option (used only to route the
    command) on to each reply callback, and most take no such argument: every transaction
    with HKEYS, SMEMBERS... fails with a TypeError. Its non-transaction path drops the option
    before calling back; make every callback drop it too."""
    for name, callback in list(callbacks.items()):
        callbacks[name] = functools.partial(_without_keys, callback)


def _without_keys(callback: Any, response: Any, **options: Any) -> Any:
    options.pop("keys", None)
    return callback(response, **options)


def is_cluster(client: Any) -> bool:
    return isinstance(client, RedisCluster)


async def primary_targets(client: Any) -> list[dict[str, Any]]:
    """Options that send a node-wide command to each primary in turn: `[{}]` for one server,
    one `{"target_nodes": node}` per primary for a cluster."""
    if not isinstance(client, RedisCluster):
        return [{}]
    await client.initialize()  # the nodes are discovered on first use; a no-op after
    return [{"target_nodes": node} for node in client.get_primaries()]
