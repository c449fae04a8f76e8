"""FactStore, ProfileStore and KnowledgeProcessor against a real (embedded Valkey) server."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gateway.core.memory.facts import DAY_SECONDS, Fact, FactPolicy
from gateway.core.ids import ConversationKey
from gateway.core.messages import Message, chain
from gateway.core.memory.profile import Profile
from gateway.memory.embedders.hashing import HashEmbedder
from gateway.memory.records.keys import MemoryKeySpace
from gateway.memory.jobs.knowledge import KnowledgeProcessor
from gateway.memory.records.facts_store import FactStore
from gateway.memory.ports import Namespace
from gateway.memory.records.profile_store import ProfileStore
from gateway.memory.records.vector_store import decode_vector, space_of

T0 = 1_700_000_000.0
KEYS = MemoryKeySpace()
EMBEDDER = HashEmbedder()
SPACE = space_of(EMBEDDER)


async def embed(texts):
    return EMBEDDER.embed(list(texts))


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class BruteForceIndex:
    """VectorIndex over the stored vectors of exactly one namespace, by numpy."""

    def __init__(self, redis) -> None:
        self.redis = redis
        self.namespaces: list[Namespace] = []

    async def search(self, namespace: Namespace, query: np.ndarray, k: int):
        self.namespaces.append(namespace)
        raw = await self.redis.hgetall(KEYS.user(namespace.tenant, namespace.user).fact_vectors)
        scored = [(key, float(np.dot(decode_vector(v, EMBEDDER.dim, SPACE), query)))
                  for key, v in raw.items()]
        return sorted(scored, key=lambda s: -s[1])[:k]


def fact(key: str, value: str, source: str = "m1", **kw) -> Fact:
    return Fact(key=key, value=value, source_ids=(source,), **kw)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(redis_client, clock) -> FactStore:
    return FactStore(redis_client, KEYS, embed, space=SPACE, related_threshold=EMBEDDER.related_threshold,
                     clock=clock)


async def test_upsert_persists_facts_and_vectors_and_bumps_the_version(store, redis_client):
    written = await store.upsert("acme", "alice", [fact("user_location", "北京", importance=0.7)])
    assert [f.key for f in written] == ["user_location"]
    [stored] = await store.list("acme", "alice")
    assert (stored.value, stored.created_at, stored.source_ids) == ("北京", T0, ("m1",))
    keys = KEYS.user("acme", "alice")
    assert json.loads(await redis_client.hget(keys.facts, "user_location"))["value"] == "北京"
    assert set(await redis_client.hkeys(keys.fact_vectors)) == {"user_location"}
    assert int(await redis_client.get(keys.version)) >= 2


async def test_a_new_value_wins_history_kept_and_a_replay_writes_nothing(store, clock):
    await store.upsert("acme", "alice", [fact("user_location", "北京", "m1")])
    clock.now += 100
    await store.upsert("acme", "alice", [fact("user_location", "上海", "m2")])
    again = await store.upsert("acme", "alice", [fact("user_location", "上海", "m2"),
                                                 fact("user_location", "北京", "m1")])
    assert again == []
    moved = await store.get("acme", "alice", "user_location")
    assert moved.value == "上海" and [h.value for h in moved.history] == ["北京"]


async def test_a_near_duplicate_key_updates_the_existing_fact(store):
    # HashEmbedder is a bag of words: the same words in another order are a duplicate.
    await store.upsert("acme", "alice", [fact("favourite_language", "Python")])
    await store.upsert("acme", "alice", [fact("language_favourite", "python", "m2"),
                                         fact("user_pet", "cat", "m2")])
    assert [f.key for f in await store.list("acme", "alice")] == ["favourite_language",
                                                                  "user_pet"]
    merged = await store.get("acme", "alice", "favourite_language")
    assert merged.source_ids == ("m1", "m2") and merged.history == ()


async def test_vocabulary_keys_are_not_merged_however_alike(store):
    await store.upsert("acme", "alice", [fact("contract_date", "2023-03-01")])
    await store.upsert("acme", "alice", [fact("payment_deadline", "2023-03-01", "m2")])
    assert {f.key for f in await store.list("acme", "alice")} == {"contract_date",
                                                                   "payment_deadline"}


async def test_caps_and_decay_drop_facts_and_their_vectors(redis_client, clock):
    store = FactStore(redis_client, KEYS, embed, space=SPACE, clock=clock,
                      policy=FactPolicy(max_facts=2, max_preferences=1, half_life_days=30,
                                        drop_below=0.1))
    await store.upsert("acme", "bob", [fact("old", "x", importance=0.5)])
    clock.now += 90 * DAY_SECONDS  # old: 0.5 / 8 < 0.1
    await store.upsert("acme", "bob", [fact(f"k{i}", str(i), f"m{i}", importance=i / 10)
                                       for i in range(1, 5)])
    keys = KEYS.user("acme", "bob")
    assert {f.key for f in await store.list("acme", "bob")} == {"k3", "k4"}
    assert set(await redis_client.hkeys(keys.fact_vectors)) == {"k3", "k4"}


async def test_recall_scores_similarity_times_decayed_weight(store, redis_client, clock):
    await store.upsert("acme", "alice", [
        fact("user_location", "Beijing", importance=0.8),
        fact("user_pet", "a cat named Momo", "m2", importance=0.8)])
    index = BruteForceIndex(redis_client)
    query = (await embed(["where is the user location"]))[0]
    [first, *_] = await store.recall("acme", "alice", query, 2, index)
    assert first.kind == "fact" and first.id == "fact:user_location"
    assert first.text == "user location: Beijing (as of 2023-11-14)"
    assert first.source_ids == ("m1",) and first.position == -1
    fresh_score = first.score
    clock.now += 30 * DAY_SECONDS
    [aged, *_] = await store.recall("acme", "alice", query, 2, index)
    assert aged.score == pytest.approx(fresh_score / 2)
    assert index.namespaces[-1] == Namespace.of_facts("acme", "alice")


async def test_delete_one_fact_removes_it_from_list_and_recall(store, redis_client):
    await store.upsert("acme", "alice", [fact("user_location", "Beijing")])
    assert await store.delete("acme", "alice", "user_location") is True
    assert await store.delete("acme", "alice", "user_location") is False
    assert await store.list("acme", "alice") == []
    query = (await embed(["user location"]))[0]
    assert await store.recall("acme", "alice", query, 3, BruteForceIndex(redis_client)) == []


@pytest.mark.parametrize("owner", [("acme", "alice"), ("acme", "bob"), ("globex", "alice")])
async def test_isolation_canaries_across_tenants_and_users(store, redis_client, owner):
    owners = [("acme", "alice"), ("acme", "bob"), ("globex", "alice")]
    for tenant, user in owners:
        await store.upsert(tenant, user, [fact("canary", f"canary of {tenant}/{user}",
                                               f"m-{tenant}-{user}")])
    tenant, user = owner
    index = BruteForceIndex(redis_client)
    query = (await embed(["canary of"]))[0]
    recalled = await store.recall(tenant, user, query, 10, index)
    listed = await store.list(tenant, user)
    assert [f.value for f in listed] == [f"canary of {tenant}/{user}"]
    assert [r.text.split(" (as of")[0] for r in recalled] == [f"canary: canary of {tenant}/{user}"]
    await store.delete_all(tenant, user)
    for other in owners:
        assert (await store.list(*other) == []) == (other == owner)


async def test_profile_store_round_trips_updates_and_deletes(redis_client):
    profiles = ProfileStore(redis_client, KEYS)
    assert await profiles.get("acme", "alice") == Profile()
    updated = await profiles.update("acme", "alice", [Message.of("user", "我是一名律师，请简短回答。")])
    assert updated == Profile("zh", "brief", "律师")
    assert await profiles.get("acme", "alice") == updated
    assert await profiles.get("acme", "bob") == Profile()
    await profiles.delete("acme", "alice")
    assert await profiles.get("acme", "alice") == Profile()


# -- the knowledge processor: a legal consultation, end to end through the stores -----------

LEGAL = ["律师您好，我叫陈静，住在杭州。", "我的手机号是13912345678。",
         "我们是2023年3月1日和房东签订的租赁合同，租期两年。", "合同金额是108000元，违约金为两个月租金。",
         "请简短回答。"]


async def test_knowledge_processor_learns_redacted_facts_and_profile_idempotently(
        redis_client, clock):
    facts = FactStore(redis_client, KEYS, embed, space=SPACE, clock=clock)
    profiles = ProfileStore(redis_client, KEYS)
    processor = KnowledgeProcessor(facts, profiles, None, clock)
    key = ConversationKey("acme", "chen", "case-1")
    messages = []
    for text in LEGAL:
        messages += [Message.of("user", text), Message.of("assistant", "好的。")]
    transcript = chain(None, messages, created_at=T0)
    first = await processor.process(key, transcript, transcript, auto_extract=True)
    assert first.facts_written >= 6 and first.profile_changed
    stored = {f.key: f for f in await facts.list("acme", "chen")}
    assert {k: stored[k].value for k in ("user_name", "contract_date", "contract_amount",
                                         "contract_term", "contract_penalty")} == {
        "user_name": "陈静", "contract_date": "2023年3月1日", "contract_amount": "108000元",
        "contract_term": "两年", "contract_penalty": "两个月租金"}
    assert stored["contract_date"].source_ids == (transcript[4].id,)
    everything = json.dumps(await redis_client.hgetall(KEYS.user("acme", "chen").facts),
                            ensure_ascii=False)
    assert "13912345678" not in everything
    assert await profiles.get("acme", "chen") == Profile("zh", "brief")
    again = await processor.process(key, transcript, transcript, auto_extract=True)
    assert (again.facts_written, again.profile_changed) == (0, False)
    assert {f.key: f for f in await facts.list("acme", "chen")} == stored


async def test_knowledge_processor_learns_nothing_with_auto_extract_off(redis_client, clock):
    facts = FactStore(redis_client, KEYS, embed, space=SPACE, clock=clock)
    processor = KnowledgeProcessor(facts, ProfileStore(redis_client, KEYS), None, clock)
    transcript = chain(None, [Message.of("user", "My name is Ann.")])
    key = ConversationKey("acme", "ann", "c")
    result = await processor.process(key, transcript, transcript, auto_extract=False)
    assert result.facts_written == 0 and await facts.list("acme", "ann") == []
