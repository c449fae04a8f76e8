"""An erase (or a conversation delete) that comes while the memory worker derives memory from
the user's conversation: nothing the job derives lands after it — not in any key, not in any
file of the store's data directory — whether the job is cancelled by its heartbeat or goes
on past the erase's wait and tries to write (its fence refuses).

The memory worker runs the gateway's real processors (turn index, pins, topics, compaction,
user recall index, facts and profile: `build_memory`), with one step of our own after the turn
index — a `Gate` that holds the job until the test lets it go, so the erase comes while it
runs. Stores: the bundled Valkey (append-only, its data directory grepped), Debian's
redis-server, and a 3-master Valkey cluster (every node's files grepped)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
import redis

from gateway.config import hash_key, parse_config
from gateway.config.tenants import TenantDirectory
from gateway.core.ids import ConversationKey
from gateway.core.messages import Message
from gateway.core.transcript import TurnRecord
from gateway.memory.erasure import MemoryErasure
from gateway.memory.jobs.worker import MemoryUpdate, MemoryWorker
from gateway.memory.runtime import MemoryRuntime, build_memory
from gateway.store import EmbeddedRedis, RedisStore, connect
from gateway.store.cluster import key_space
from gateway.store.recording.sharded import ShardedRecorder
from gateway.upstream.fake import FakeUpstream
from tests.support.store_dump import keys_mentioning

ERIN = ConversationKey("acme", "erin-7Q", "c-one")
ERIN_OTHER = ConversationKey("acme", "erin-7Q", "c-two")
BOB = ConversationKey("acme", "bob-5K", "c-one")
CANARY = {ERIN: "Zorblax", ERIN_OTHER: "Plimsoq", BOB: "Quillon"}
SHARDS = 4


@dataclass
class Store:
    url: str
    cluster: bool
    data_dir: Path | None
    """Where the store keeps its files (None: it keeps none — redis-server without AOF)."""
    node_urls: tuple[str, ...]


@pytest.fixture(params=["embedded", "redis-server", "cluster"])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
          ) -> Any:
    if request.param == "embedded":
        server = EmbeddedRedis(tmp_path_factory.mktemp("emb"), die_with_parent=True)
        server.start()
        try:
            yield Store(server.url, False, server.data_dir, (server.url,))
        finally:
            server.stop()
    elif request.param == "redis-server":
        url = request.getfixturevalue("debian_redis_server_url")
        with redis.Redis.from_url(url) as client:
            client.flushdb()
        yield Store(url, False, None, (url,))
    else:
        cluster = request.getfixturevalue("valkey_cluster")
        cluster.flush()
        yield Store(cluster.url, True, cluster.directory,
                    tuple(f"redis://127.0.0.1:{port}/0" for port in cluster.ports))


def config_for(store: Store) -> Any:
    tenant = {"api_keys": [{"sha256": hash_key("sk-acme")}],
              "models": {"m": {"model": "fake/echo"}},
              "memory": {"compaction": {"min_rounds": 2, "recent_window_turns": 1}}}
    cluster = {"store_cluster": {"enabled": True, "shards": SHARDS}} if store.cluster else {}
    return parse_config({"store": store.url, **cluster,
                         "memory": {"embedder": {"backend": "hash"}},
                         "tenants": {"acme": tenant}})


class Gate:
    """A step of the job that holds it, for one conversation, until `release` is set."""

    name = "gate"

    def __init__(self, key: ConversationKey):
        self.key = key
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def process(self, update: MemoryUpdate) -> None:
        if update.key == self.key:
            self.entered.set()
            await self.release.wait()


@dataclass
class Setup:
    client: Any
    store: RedisStore
    runtime: MemoryRuntime
    recorder: ShardedRecorder

    def worker(self, gate: Gate, *, heartbeat_seconds: float, lock_ms: int) -> MemoryWorker:
        """The runtime's processors with `gate` after the turn index (which writes first)."""
        first, *rest = self.runtime.worker.processors
        return MemoryWorker(self.client, [first, gate, *rest], keys=self.runtime_keys,
                            heartbeat_seconds=heartbeat_seconds, lock_ms=lock_ms,
                            transcripts=self.store.applied)

    @property
    def runtime_keys(self) -> Any:
        from gateway.memory.records.keys import MemoryKeySpace
        return MemoryKeySpace(self.store.keys)

    def control(self, settle_seconds: float) -> MemoryErasure:
        return MemoryErasure(self.client, self.store, settle_seconds=settle_seconds,
                             poll_seconds=0.01, disk_wait_seconds=10)


@pytest.fixture
async def setup(store: Store) -> AsyncIterator[Setup]:
    config = config_for(store)
    client = connect(store.url, cluster=store.cluster)
    rstore = RedisStore(client, key_space(config))
    runtime = build_memory(config, client, FakeUpstream(), TenantDirectory(config))
    recorder = ShardedRecorder(client, rstore.keys, consumer_prefix="test")
    try:
        yield Setup(client, rstore, runtime, recorder)
    finally:
        runtime.close()
        await client.aclose()


async def converse(setup: Setup, key: ConversationKey) -> None:
    """Turns with the conversation's canary: facts, a profile, enough rounds for chunks."""
    word = CANARY[key]
    texts = [f"My name is {word} Canary.", f"I live in {word}ville.",
             *(f"{word} note {i}: the {word} garden needs water on day {i}." for i in range(5))]
    for text in texts:
        messages = (Message.of("user", text), Message.of("assistant", f"Noted: {text}"))
        await setup.store.record(key, TurnRecord("append", None, messages, time.time()))
    await setup.recorder.process_available()


def files_mentioning(directory: Path | None, word: str) -> list[str]:
    if directory is None:
        return []
    found = []
    for path in directory.rglob("*"):
        try:
            if path.is_file() and word.encode() in path.read_bytes():
                found.append(str(path.relative_to(directory)))
        except FileNotFoundError:  # an old increment file dropped by a rewrite
            continue
    return sorted(found)


def rewrites_done(urls: tuple[str, ...]) -> bool:
    for url in urls:
        with redis.Redis.from_url(url, decode_responses=True) as r:
            info = r.info("persistence")
            if int(info["aof_rewrite_in_progress"]) or int(info["aof_rewrite_scheduled"]):
                return False
    return True


def wait_for(condition: Any, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def assert_nothing_left(store: Store, word: str) -> None:
    """No key and, once the store's rewrites have ended, no file holds `word`."""
    assert keys_mentioning(store.node_urls, word) == []
    if store.data_dir is not None:
        wait_for(lambda: rewrites_done(store.node_urls), "the rewrite never ended")
        assert files_mentioning(store.data_dir, word) == []


async def prepared(setup: Setup, store: Store, gate: Gate, **worker: Any,
                   ) -> tuple[MemoryWorker, asyncio.Task[int]]:
    """Erin's and Bob's conversations recorded (on disk, where the store keeps files), and
    the worker running, held by `gate` in Erin's job after her turns were indexed."""
    await converse(setup, ERIN)
    await converse(setup, BOB)
    if store.data_dir is not None:
        wait_for(lambda: files_mentioning(store.data_dir, "Zorblax"),
                 "the canary never reached the disk", 10)
    worker_ = setup.worker(gate, **worker)
    run = asyncio.get_running_loop().create_task(worker_.process_available())
    await asyncio.wait_for(gate.entered.wait(), 60)
    # The job wrote before the gate: the erase has derived data to sweep.
    assert [k for k in keys_mentioning(store.node_urls, "Zorblax") if ":m:turns" in k]
    return worker_, run


async def test_an_erase_cancels_the_running_job_and_nothing_of_the_user_comes_back(
        setup, store):
    gate = Gate(ERIN)  # never released: only the heartbeat's cancel ends Erin's job
    worker, run = await prepared(setup, store, gate, heartbeat_seconds=0.05, lock_ms=60_000)
    assert await setup.store.load(ERIN) and setup.store.cache.get(ERIN) is not None

    erasure = await setup.control(settle_seconds=30).erase(ERIN.tenant, ERIN.user)
    assert erasure.complete  # the job saw the tombstone, stopped and released its lock
    assert setup.store.cache.get(ERIN) is None  # nor is it held decoded in this process
    await asyncio.wait_for(run, 60)

    assert_nothing_left(store, "Zorblax")
    assert worker.fenced == 1
    # Bob's conversation was processed after it, by every step: his memory is all there.
    bob = keys_mentioning(store.node_urls, "Quillon")
    assert any(k.endswith(":m:chunks") for k in bob)
    assert any(k.endswith(":recall") for k in bob) and any(k.endswith(":facts") for k in bob)


async def test_a_job_that_outlasts_the_erase_writes_nothing_when_it_goes_on(setup, store):
    # A heartbeat far away: the job is not cancelled, it goes on after the erase and every
    # step after the gate tries to write (compaction, recall index, facts, profile).
    gate = Gate(ERIN)
    worker, run = await prepared(setup, store, gate, heartbeat_seconds=3600,
                                 lock_ms=10_000_000)

    erasure = await setup.control(settle_seconds=0.05).erase(ERIN.tenant, ERIN.user)
    assert not erasure.complete  # the job still held its lock when the erase stopped waiting
    gate.release.set()
    await asyncio.wait_for(run, 60)

    assert_nothing_left(store, "Zorblax")
    assert worker.fenced == 1
    # The steps after the gate do write when nothing was erased: Bob's run made them all.
    bob = keys_mentioning(store.node_urls, "Quillon")
    assert any(k.endswith(":m:chunks") for k in bob)
    assert any(k.endswith(":recall") for k in bob) and any(k.endswith(":facts") for k in bob)
    # Nothing of Erin is left but her tombstone: a second erase finds nothing.
    again = await setup.control(settle_seconds=1).erase(ERIN.tenant, ERIN.user)
    assert again.complete and again.keys_deleted == 0


@pytest.mark.parametrize("store", ["embedded", "cluster"], indirect=True)
async def test_deleting_a_conversation_during_its_job_leaves_nothing_of_it(setup, store):
    await converse(setup, ERIN_OTHER)  # Erin's other conversation: its memory stays
    gate = Gate(ERIN)
    worker, run = await prepared(setup, store, gate, heartbeat_seconds=3600,
                                 lock_ms=10_000_000)

    control = setup.control(settle_seconds=0.05)
    assert await control.delete_conversation(ERIN) is not None
    gate.release.set()
    await asyncio.wait_for(run, 60)

    assert_nothing_left(store, "Zorblax")
    assert worker.fenced == 1
    kept = keys_mentioning(store.node_urls, "Plimsoq")
    assert any(k.endswith(":m:chunks") for k in kept) and any(k.endswith(":recall")
                                                                for k in kept)
