"""Redis Cluster as the store (`store_cluster.enabled`): the real gateway over HTTP, the real
openai SDK, a real 3-master Valkey cluster (tests/support/cluster.py).

Pinned here: every key of one user is in one slot, and the record stream and memory queue its
turns go through are in that slot too (so every script and MULTI/EXEC stays in one slot — the
cluster would refuse it otherwise with CROSSSLOT); users spread over every node; a
conversation's turns and a user's memory across conversations are recalled; erasing a user
removes every one of its keys on every node and nothing of another user's; without a cluster
the key names are byte-identical to those before clustering existed."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path
from typing import Iterator

import httpx
import openai
import pytest
import redis
from redis.crc import key_slot

from gateway.http.console.views import find_conversation, users_page
from gateway.core.ids import ConversationKey
from gateway.errors import ConfigError
from gateway.memory.records.keys import MemoryKeySpace
from gateway.store import connect
from gateway.store.encryption.keyring import load_encryption
from gateway.store.keys import KeySpace
from gateway.store.encryption.rotation import rotate_tenant
from tests.support.gateway import KEYS, forwarded, gateway_config, running_gateway
from tests.integration.test_encryption import KEY_A

SHARDS = 8
CANARY = {("acme", "ursula"): "Quixote", ("acme", "bruno"): "Rocinante",
          ("globex", "ursula"): "Dulcinea"}


def cluster_config(url: str, **top):
    return gateway_config(url, store_cluster={"enabled": True, "shards": SHARDS}, **top)


@pytest.fixture
def gateway_url(cluster_url: str) -> Iterator[str]:
    with running_gateway(cluster_config(cluster_url)) as url:
        yield url


def say(url: str, text: str, conversation: str, user: str, tenant: str = "acme") -> str:
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEYS[tenant], max_retries=0)
    reply = client.chat.completions.create(
        model="echo", messages=[{"role": "user", "content": text}],
        extra_headers={"X-Conversation-Id": conversation, "X-User-Id": user})
    return reply.choices[0].message.content or ""


def seen(url: str, question: str, conversation: str, user: str, tenant: str = "acme") -> str:
    """What the upstream received for `question` (the reply is not stored)."""
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEYS[tenant], max_retries=0)
    reply = client.chat.completions.create(
        model="messages", messages=[{"role": "user", "content": question}],
        extra_headers={"X-Conversation-Id": conversation, "X-User-Id": user,
                       "X-Gateway-Persist": "false"})
    return "\n".join(str(m.get("content"))
                     for m in forwarded(reply.choices[0].message.content or "[]"))


# -- key names ------------------------------------------------------------------------------


def test_without_a_cluster_key_names_are_those_of_every_earlier_release():
    keys, key = KeySpace(), ConversationKey("acme", "u1", "c1")
    assert keys.conversation(key).transcript == "gw:c:4:acme:2:u1:2:c1:transcript"
    assert keys.records == keys.records_at(0) == "gw:records"
    assert keys.dead_count == "gw:records:dead:count"
    assert keys.memory_dirty == "gw:memory:dirty"
    assert keys.memory_dead_at(0) == "gw:memory:dead"
    assert keys.erased("acme", "u1").startswith("gw:erased:")
    assert MemoryKeySpace(keys).user("acme", "u1").facts == "gw:u:4:acme:2:u1:facts"
    assert keys.rate_limit("acme", "tenant", "requests") == "gw:rl:4:acme:tenant:requests"
    assert list(keys.shard_ids()) == [0]


def test_every_key_of_a_user_and_its_queues_share_one_slot():
    keys = KeySpace(shards=SHARDS)
    memory = MemoryKeySpace(keys)
    for user in ("u1", "ursula", "{evil}", "a:b"):
        key = ConversationKey("acme", user, "c:1")
        shard = keys.shard_of("acme", user)
        names = [*keys.conversation(key).all(), *memory.conversation(key).all(),
                 *memory.user("acme", user).all(), memory.user("acme", user).recall_members("c"),
                 keys.erased("acme", user), keys.last_request(key), keys.records_at(shard),
                 keys.dead_at(shard), keys.dead_count_at(shard), keys.memory_dirty_of(key),
                 keys.memory_dead_at(shard), keys.conversation_usage(key),
                 keys.user_usage("acme", user), keys.tenant_usage_at(shard, "acme")]
        assert len({key_slot(n.encode()) for n in names}) == 1, names


def test_shards_spread_evenly_over_the_slot_ranges_of_three_masters():
    keys = KeySpace(shards=SHARDS)
    third = 16384 // 3
    per_master = Counter(min(2, key_slot(keys.records_at(s).encode()) // third)
                         for s in keys.shard_ids())
    assert sorted(per_master.values()) == [2, 3, 3]


def test_a_cluster_key_space_asks_for_the_shard_of_per_shard_keys():
    with pytest.raises(RuntimeError, match="records_at"):
        KeySpace(shards=4).records  # noqa: B018


def test_the_cluster_needs_a_server_url():
    with pytest.raises(ConfigError, match="store_cluster.enabled needs"):
        gateway_config("embedded", store_cluster={"enabled": True})
    with pytest.raises(ConfigError, match="store_cluster.shards"):
        gateway_config("redis://127.0.0.1:1", store_cluster={"enabled": True, "shards": 0})


# -- through the gateway --------------------------------------------------------------------


def test_a_conversation_and_a_users_memory_across_conversations(gateway_url, valkey_cluster):
    for (tenant, user), name in CANARY.items():
        say(gateway_url, f"my horse is named {name}", "first", user, tenant)
        say(gateway_url, "I live in Lisbon", "first", user, tenant)

    # The conversation's own turns come back (stateful client: only the new message sent).
    same = seen(gateway_url, "What did I tell you?", "first", "ursula")
    assert "my horse is named Quixote" in same and "Lisbon" in same
    # Another conversation of the same user recalls them (the user-level memory).
    other = seen(gateway_url, "What is my horse called?", "second", "ursula")
    assert "Quixote" in other
    # Isolation: never another user's or tenant's canary.
    assert "Rocinante" not in other and "Dulcinea" not in other
    globex = seen(gateway_url, "What is my horse called?", "second", "ursula", "globex")
    assert "Dulcinea" in globex and "Quixote" not in globex

    stored = valkey_cluster.keys()
    # Three users on 8 shards: the data is on more than one node.
    assert sum(1 for names in stored.values() if names) >= 2, stored
    # Readiness pings every primary; the queue gauges sum every shard's queues (all applied).
    ready = httpx.get(gateway_url + "/readyz", timeout=10)
    assert ready.status_code == 200 and ready.json()["store"] == "ok"
    metrics = httpx.get(gateway_url + "/metrics", timeout=10).text
    assert "gateway_record_queue_length 0.0" in metrics
    assert "gateway_record_dead_letters 0.0" in metrics
    assert 'gateway_recorder_applied' in metrics and "queue metrics unavailable" not in metrics
    # Usage counted with each turn in its user's slot; a tenant's summed over the shards.
    for (tenant, user), _ in CANARY.items():
        usage = httpx.get(gateway_url + "/v1/memory/usage", timeout=10, headers={
            "Authorization": f"Bearer {KEYS[tenant]}", "X-User-Id": user}).json()
        assert usage["requests"] == 2 and usage["tokens"]["prompt"] > 0, (tenant, user)
    for tenant, count in (("acme", 4), ("globex", 2)):
        usage = httpx.get(gateway_url + "/v1/usage", timeout=10,
                          headers={"Authorization": f"Bearer {KEYS[tenant]}"}).json()
        assert usage["requests"] == count, tenant


def test_readiness_fails_when_a_primary_is_gone(cluster_url, tmp_path):
    """A cluster missing a primary cannot serve that node's users: not ready (503)."""
    from gateway.store.local_cluster import ValkeyCluster

    small = ValkeyCluster(tmp_path / "c", 3)
    small.start()
    try:
        with running_gateway(cluster_config(small.url)) as url:
            assert httpx.get(url + "/readyz", timeout=10).status_code == 200
            small.processes[2].kill()
            small.processes[2].wait()
            assert httpx.get(url + "/readyz", timeout=10).status_code == 503
    finally:
        small.stop()


def test_erase_removes_every_key_of_the_user_on_every_node(gateway_url, valkey_cluster):
    for (tenant, user), name in CANARY.items():
        say(gateway_url, f"my horse is named {name}", "first", user, tenant)
        say(gateway_url, f"my horse is named {name}", "second", user, tenant)
    before = valkey_cluster.keys()
    nodes = [redis.Redis(host="127.0.0.1", port=port, decode_responses=True)
             for port in valkey_cluster.ports]
    deadline = time.monotonic() + 10
    while not _files_mentioning(valkey_cluster.directory, "Quixote"):  # fsync'd every second
        assert time.monotonic() < deadline, "the canary never reached the disk"
        time.sleep(0.1)
    try:
        # On every node a rewrite forked before the erase (it holds the canary) still runs
        # when the erase comes: the one that removes it from disk must start after it.
        for node in nodes:
            node.config_set("rdb-key-save-delay", 20_000)
            node.bgrewriteaof()
        response = httpx.delete(gateway_url + "/v1/memory", timeout=30,
                                headers={"Authorization": f"Bearer {KEYS['acme']}",
                                         "X-User-Id": "ursula"})
    finally:
        for node in nodes:
            node.config_set("rdb-key-save-delay", 0)
    assert response.status_code == 200, response.text
    after = valkey_cluster.keys()

    ursula = (":4:acme:6:ursula:", "4:acme:6:ursula")
    left = [n for names in after.values() for n in names if any(p in n for p in ursula)]
    assert left == []
    # Each primary (append-only, as the fixture starts them) rewrites its files after the
    # erase: the canary leaves every node's data directory.
    assert response.json()["disk"] in ("rewritten", "pending")
    deadline = time.monotonic() + 30
    while left := _files_mentioning(valkey_cluster.directory, "Quixote"):
        assert time.monotonic() < deadline, f"erased text still on disk: {left}"
        time.sleep(0.2)
    assert _files_mentioning(valkey_cluster.directory, "Rocinante")  # others' text stays
    for node in nodes:
        node.close()
    # Nothing of the others went.
    for tenant, user in (("acme", "bruno"), ("globex", "ursula")):
        marker = f":{len(tenant)}:{tenant}:{len(user)}:{user}:"
        had = {n for names in before.values() for n in names if marker in n}
        has = {n for names in after.values() for n in names if marker in n}
        assert had and had == has
    # And the erased user starts afresh, still working through the cluster.
    assert "Quixote" not in seen(gateway_url, "What is my horse called?", "third", "ursula")


def _files_mentioning(directory: Path, word: str) -> list[str]:
    needle = word.encode()
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*")
                  if p.is_file() and needle in p.read_bytes())


def test_the_console_lists_and_finds_users_on_every_node(gateway_url, cluster_url):
    users = [f"user-{n}" for n in range(12)]
    for user in users:
        say(gateway_url, "hello", "shared-id", user)

    async def listed() -> tuple[list[str], list[str]]:
        client = connect(cluster_url, cluster=True)
        keys = KeySpace(shards=SHARDS)
        try:
            page = await users_page(client, keys, "acme", 0)
            assert page.next_cursor == 0  # one page holds them all
            return page.users, await find_conversation(client, keys, "acme", "shared-id")
        finally:
            await client.aclose()

    page, found = asyncio.run(listed())
    assert page == found == sorted(users)
    assert {KeySpace(shards=SHARDS).shard_of("acme", u) for u in users} != {0}


def test_key_rotation_seals_every_text_on_every_node(cluster_url, monkeypatch):
    monkeypatch.setenv("GW_TEST_KEY_A", KEY_A)
    clear = cluster_config(cluster_url)
    with running_gateway(clear) as url:
        for user in ("erin-7Q", "bob-5K", "ann-3Z"):
            say(url, "I live in Zephquorville", "c-one", user)
            say(url, "My garden is in Zephquorville too", "c-two", user)
    sealed = cluster_config(cluster_url, encryption={"key_env": "GW_TEST_KEY_A"})

    async def rotate() -> dict[str, object]:
        client = connect(cluster_url, cluster=True)
        try:
            encryption = await load_encryption(sealed, client)
            return (await rotate_tenant(client, encryption, "acme",
                                        KeySpace(shards=SHARDS))).to_json()
        finally:
            await client.aclose()

    report = asyncio.run(rotate())
    assert report["resealed"] >= 12 and report["remaining"] == 0, report
    assert report["disk"] == "rewritten"
    with redis.RedisCluster.from_url(cluster_url, decode_responses=True) as client:
        found = [n for n in client.scan_iter(count=1000, target_nodes=client.ALL_NODES)
                 if client.type(n) in ("list", "hash")
                 and "Zephquor" in json.dumps(client.lrange(n, 0, -1) if client.type(n) == "list"
                                              else client.hgetall(n))]
    assert found == []
    with running_gateway(sealed) as url:
        assert "Zephquorville" in seen(url, "Where do I live?", "c-one", "erin-7Q")


def test_the_memory_api_lists_exports_and_deletes_on_the_cluster(gateway_url, valkey_cluster):
    """The user-control API over a cluster: list a user's and the tenant's anonymous
    conversations, export, delete one conversation (its keys leave every node)."""
    say(gateway_url, "my horse is named Quixote", "keep", "ursula")
    say(gateway_url, "my horse is named Quixote", "drop", "ursula")
    client = openai.OpenAI(base_url=gateway_url + "/v1", api_key=KEYS["acme"], max_retries=0)
    client.chat.completions.create(model="echo", messages=[{"role": "user", "content": "hi"}],
                                   extra_headers={"X-Conversation-Id": "anon"})
    auth = {"Authorization": f"Bearer {KEYS['acme']}"}
    user = {**auth, "X-User-Id": "ursula"}

    def ids(headers: dict[str, str]) -> list[str]:
        response = httpx.get(gateway_url + "/v1/memory/conversations", headers=headers,
                             timeout=30)
        assert response.status_code == 200, response.text
        return sorted(c["id"] for c in response.json()["data"])

    assert ids(user) == ["drop", "keep"]
    assert ids(auth) == ["anon"]  # the tenant's conversations sent without a user id
    export = httpx.get(gateway_url + "/v1/memory/export", headers=user, timeout=30)
    assert export.status_code == 200 and len(export.json()["conversations"]) == 2
    gone = httpx.delete(gateway_url + "/v1/memory/conversations/drop", headers=user,
                        timeout=30)
    assert gone.status_code == 200, gone.text
    assert ids(user) == ["keep"]
    marker = ":6:ursula:4:drop:"
    left = {n.rpartition(":")[2] for names in valkey_cluster.keys().values() for n in names
            if marker in n}
    # Only the seq counters stay (RedisStore.delete: a turn enqueued before the delete must
    # never apply afterwards), as on one Redis.
    assert left <= {"seq", "applied"}, left
    assert any(":6:ursula:4:keep:transcript" in n for names in valkey_cluster.keys().values()
               for n in names)


def test_a_long_conversation_is_archived_and_its_topics_kept_on_the_cluster(cluster_url,
                                                                            valkey_cluster):
    """The stored-messages cap and topic state on a cluster: the archive script moves
    transcript elements to the archive (two keys, one slot), the topic state is kept, and the
    whole history is still what the user sees."""
    config = cluster_config(cluster_url, request_limits={"max_stored_messages": 8})
    with running_gateway(config) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key=KEYS["acme"], max_retries=0,
                               default_headers={"X-Conversation-Id": "long",
                                                "X-User-Id": "ursula"})
        history: list[dict[str, str]] = []
        for i in range(10):
            history.append({"role": "user", "content": f"Turn {i}: the harbour boat {i}."})
            reply = client.chat.completions.create(model="echo", messages=history)
            history.append({"role": "assistant", "content": reply.choices[0].message.content})
        auth = {"Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": "ursula"}
        shown = httpx.get(url + "/v1/memory/conversations/long", headers=auth, timeout=30)
        assert shown.status_code == 200, shown.text
        assert [m["message"]["content"] for m in shown.json()["messages"]] \
            == [m["content"] for m in history]
        topics = httpx.get(url + "/v1/memory/conversations/long/topics", headers=auth,
                           timeout=30)
        assert topics.status_code == 200 and topics.json()["current"] is not None, topics.text
    ck = KeySpace(shards=SHARDS).conversation(ConversationKey("acme", "ursula", "long"))
    mk = MemoryKeySpace(KeySpace(shards=SHARDS)).conversation(
        ConversationKey("acme", "ursula", "long"))
    stored = {n for names in valkey_cluster.keys().values() for n in names}
    assert {ck.archive, ck.transcript, mk.topics} <= stored
    assert key_slot(ck.archive.encode()) == key_slot(ck.transcript.encode()) \
        == key_slot(mk.topics.encode())


async def test_cluster_calls_beyond_the_pool_size_wait_for_a_place(cluster_url):
    """redis-py's cluster nodes fail a call at once when their connections are all in use;
    the store's cluster client waits for a place instead, like the one-Redis pool."""
    client = connect(cluster_url, cluster=True, max_connections=2, pool_timeout=5)
    try:
        # Each call holds its connection 50 ms; 20 at once, through 2 places, on every node.
        results = await asyncio.gather(*(client.blpop([f"absent-{i}"], timeout=0.05)
                                         for i in range(20)))
        async with client.pipeline(transaction=False) as pipe:
            pipe.get("absent-a")
            pipe.get("absent-b")
            assert await pipe.execute() == [None, None]
        stats = client.gate.stats()
    finally:
        await client.aclose()
    assert results == [None] * 20
    assert stats.max_connections == 2 and stats.in_use == 0
    assert stats.waits >= 18 and stats.timeouts == 0


def test_a_burst_beyond_the_pool_on_the_cluster_runs_with_memory(cluster_url):
    """100 concurrent clients, store_pool_size 4, on the cluster: none without memory."""
    config = cluster_config(cluster_url, server={"store_pool_size": 4})
    with running_gateway(config) as url:
        async def burst() -> list[httpx.Response]:
            limits = httpx.Limits(max_connections=100, max_keepalive_connections=0)
            async with httpx.AsyncClient(timeout=60, limits=limits) as client:
                async def one(i: int) -> httpx.Response:
                    return await client.post(
                        url + "/v1/chat/completions",
                        json={"model": "echo", "messages": [{"role": "user",
                                                             "content": f"burst {i}"}]},
                        headers={"Authorization": f"Bearer {KEYS['acme']}",
                                 "X-Conversation-Id": f"burst-{i}",
                                 "X-User-Id": f"user-{i % 7}"})
                return await asyncio.gather(*(one(i) for i in range(100)))

        responses = asyncio.run(burst())
        pool = httpx.get(url + "/readyz", timeout=10).json()["store_pool"]
    assert [r.status_code for r in responses] == [200] * 100
    assert [r for r in responses if "x-gateway-passthrough" in r.headers] == []
    assert pool["max_connections"] == 4 and pool["timeouts"] == 0 and pool["waits"] > 0


def _blocked_clients(url: str) -> int:
    with redis.RedisCluster.from_url(url) as probe:
        return sum(int(probe.info("clients", target_nodes=node)["blocked_clients"])
                   for node in probe.get_nodes())


async def test_a_recorders_blocking_reads_hold_no_place_the_requests_wait_for(cluster_url):
    client = connect(cluster_url, cluster=True, max_connections=2, pool_timeout=5)
    try:
        # Four blocking reads (as four shards' recorders) wait for entries — the store
        # shows all four blocked before the test goes on (a wait on the condition)...
        reads = [asyncio.create_task(client.xread({f"{{s{i}}}:stream": "$"}, block=30_000))
                 for i in range(4)]
        deadline = time.monotonic() + 10
        while await asyncio.to_thread(_blocked_clients, cluster_url) < 4:
            assert time.monotonic() < deadline, "the four reads never blocked"
            await asyncio.sleep(0.01)
        # ...while calls go through the 2 places without waiting for them.
        for i in range(5):
            assert await client.get(f"absent-{i}") is None
        stats = client.gate.stats()
        for i in range(4):  # an entry each ends the reads
            await client.xadd(f"{{s{i}}}:stream", {"n": str(i)})
        assert all(await asyncio.gather(*reads))
    finally:
        await client.aclose()
    assert stats.waits == 0 and stats.timeouts == 0


def test_deletes_in_a_burst_during_rewrites_leave_no_canary_on_any_nodes_disk(cluster_url,
                                                                               valkey_cluster):
    # tests/integration/test_memory_erase.py's burst, on the cluster: on every primary a slowed
    # rewrite (forked before the burst: it holds the canaries) still runs when an erase, three
    # conversation deletes and two anonymous ones come at once, beside a client that keeps
    # writing. Every file of every node's data directory must lose every canary within 30 s.
    from tests.integration.test_memory_erase import (BURST_CANARIES, delete_in_a_burst,
                                                     _files_mentioning as on_disk,
                                                     populate_for_a_burst, wait_until_no_canary)

    memory = {"compaction": {"min_rounds": 2, "recent_window_turns": 1}}
    nodes = [redis.Redis(host="127.0.0.1", port=port) for port in valkey_cluster.ports]
    with running_gateway(cluster_config(cluster_url, tenant={"memory": memory})) as url:
        populate_for_a_burst(url)
        directory = valkey_cluster.directory
        deadline = time.monotonic() + 10
        while missing := [w for w in BURST_CANARIES.values() if not on_disk(directory, w)]:
            assert time.monotonic() < deadline, f"never reached the disk: {missing}"
            time.sleep(0.1)
        holders = {path.split("/")[0] for w in BURST_CANARIES.values()
                   for path in on_disk(directory, w)}

        def quick() -> None:  # the rewrites after the burst need not be slow
            for node in nodes:
                node.config_set("rdb-key-save-delay", 0)

        try:
            for node in nodes:
                node.config_set("rdb-key-save-delay", 20_000)
                node.bgrewriteaof()
            delete_in_a_burst(url, quick)
        finally:
            quick()
        wait_until_no_canary(lambda w: on_disk(directory, w))
    for node in nodes:
        node.close()
    # The canaries were spread: more than one node's files held them.
    assert len(holders) > 1, holders


def test_a_node_whose_port_was_taken_meanwhile_starts_again_on_a_new_one(tmp_path):
    """The ports are chosen free, then bound by the nodes: another process may take one in
    between (the suite runs in parallel); the start tries again instead of waiting it out."""
    import socket

    from gateway.store.local_cluster import ValkeyCluster

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))  # bound, as a client's port would be: the node cannot
        node = ValkeyCluster(tmp_path / "n", 1, cluster=False)
        node.ports[0] = taken.getsockname()[1]
        try:
            node.start()
            assert node.ports[0] != taken.getsockname()[1]
            with redis.Redis.from_url(node.url) as client:
                assert client.ping()
        finally:
            node.stop()
