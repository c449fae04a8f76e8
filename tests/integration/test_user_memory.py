"""A user's memory spans their conversations: a new conversation of an identified user recalls
the turns, summary chunks and facts of the user's earlier ones — never another user's or
tenant's, never for a request without a user id — and forgets a conversation deleted.

End to end: the real app over HTTP, the real openai SDK, a real store, inline recording (the
recorder and the memory worker have run when a reply returns). Questions are asked with
`X-Gateway-Persist: false`: the `fake/echo-messages` upstream answers with the messages it
received, recalled memory included, and a stored copy of that answer would be recalled later."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterator

import httpx
import numpy as np
import openai
import pytest

from gateway.core.ids import ConversationKey
from gateway.core.messages import Message, StoredMessage, chain
from gateway.core.context.blocks import recalled_in_reading_order
from gateway.core.recall.ranking import FEATURES, Ranker
from gateway.memory.embedders.hashing import HashEmbedder
from gateway.memory.search.embedding import EmbeddingService
from gateway.memory.records.keys import MemoryKeySpace
from gateway.memory.search.lexical_index import Bm25LexicalIndex
from gateway.memory.recall.recaller import Recaller, queue_namespaces, read_namespaces
from gateway.memory.jobs.turn_index import TurnIndexer
from gateway.memory.jobs.user_index import UserRecallIndex
from gateway.memory.records.user_recall import qualified_id
from gateway.memory.search.vector_index import FaissVectorIndex
from tests.support.gateway import KEYS, forwarded, gateway_config, running_gateway

CAT = "my cat is named Quixote"
KEY_HIDDEN = "The spare key is hidden under the blue flowerpot."


@pytest.fixture
def gateway_url(redis_url: str) -> Iterator[str]:
    with running_gateway(gateway_config(redis_url)) as url:
        yield url


def headers(conversation: str, user: str | None, persist: bool = True) -> dict[str, str]:
    out = {"X-Conversation-Id": conversation}
    if user is not None:
        out["X-User-Id"] = user
    if not persist:
        out["X-Gateway-Persist"] = "false"
    return out


def say(url: str, text: str, conversation: str, user: str | None,
        tenant: str = "acme") -> None:
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEYS[tenant], max_retries=0)
    client.chat.completions.create(model="echo", messages=[{"role": "user", "content": text}],
                                   extra_headers=headers(conversation, user))


def seen(url: str, question: str, conversation: str, user: str | None,
         tenant: str = "acme") -> str:
    """What the upstream received for `question`, asked in `conversation` (not stored)."""
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEYS[tenant], max_retries=0)
    reply = client.chat.completions.create(
        model="messages", messages=[{"role": "user", "content": question}],
        extra_headers=headers(conversation, user, persist=False))
    return "\n".join(str(m.get("content")) for m in forwarded(reply.choices[0].message.content))


def test_a_new_conversation_recalls_what_the_user_said_in_an_earlier_one(gateway_url):
    say(gateway_url, CAT, "a", "ursula")
    say(gateway_url, KEY_HIDDEN, "a", "ursula")

    cat = seen(gateway_url, "What is my cat called?", "b", "ursula")
    assert "Quixote" in cat
    assert CAT in cat  # the turn itself, not only the fact learned from it
    # No fact is learned from this one: only the turn index of conversation "a" knows it.
    assert "blue flowerpot" in seen(gateway_url, "Where is the spare key hidden?", "c", "ursula")


def test_another_user_tenant_or_an_anonymous_request_never_recalls_it(gateway_url):
    say(gateway_url, CAT, "a", "ursula")
    say(gateway_url, KEY_HIDDEN, "a", "ursula")
    # The same conversation id, another user and tenant: their own conversations.
    say(gateway_url, "I like tea.", "a", "victor")
    say(gateway_url, "I like tea.", "a", "ursula", tenant="globex")

    for user, tenant in (("victor", "acme"), ("ursula", "globex"), (None, "acme")):
        for question in ("What is my cat called?", "Where is the spare key hidden?"):
            text = seen(gateway_url, question, "b", user, tenant)
            assert "Quixote" not in text and "flowerpot" not in text, (user, tenant)


def test_conversations_without_a_user_id_share_nothing(gateway_url, redis_url):
    say(gateway_url, KEY_HIDDEN, "x", None)
    assert "flowerpot" in seen(gateway_url, "Where is the spare key hidden?", "x", None)
    assert "flowerpot" not in seen(gateway_url, "Where is the spare key hidden?", "y", None)
    import redis

    with redis.Redis.from_url(redis_url, decode_responses=True) as r:
        assert not list(r.scan_iter(match="gw:u:*recall*"))


def test_a_deleted_conversation_is_no_longer_recalled_by_the_users_others(gateway_url,
                                                                          redis_url):
    say(gateway_url, KEY_HIDDEN, "a", "ursula")
    say(gateway_url, "I like tea.", "keep", "ursula")
    assert "flowerpot" in seen(gateway_url, "Where is the spare key hidden?", "b", "ursula")

    response = httpx.delete(gateway_url + "/v1/memory/conversations/a", timeout=30, headers={
        "Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": "ursula"})
    assert response.status_code == 200, response.text

    assert "flowerpot" not in seen(gateway_url, "Where is the spare key hidden?", "b", "ursula")
    assert "tea" in seen(gateway_url, "What do I like to drink? tea?", "b", "ursula")
    import redis

    with redis.Redis.from_url(redis_url, decode_responses=True) as r:
        for name in r.scan_iter():
            value = {"hash": r.hgetall, "list": lambda n: r.lrange(n, 0, -1),
                     "set": r.smembers, "string": r.get}.get(r.type(name), lambda n: "")(name)
            assert "flowerpot" not in repr(value), name


# -- recall across the user's conversations, against the store directly -----------------------

def stored(texts: list[str], created_at: float) -> list[StoredMessage]:
    roles = ("user", "assistant")
    return list(chain(None, [Message.of(roles[i % 2], t) for i, t in enumerate(texts)],
                      created_at=created_at))


class Memory:
    def __init__(self, redis: Any) -> None:
        self.redis = redis
        self.embedding = EmbeddingService(HashEmbedder())
        self.vectors = FaissVectorIndex(redis, self.embedding.dim, space=self.embedding.space)
        self.lexical = Bm25LexicalIndex(redis)
        self.indexer = TurnIndexer(redis, self.embedding)
        self.user_index = UserRecallIndex(redis)
        self.recaller = Recaller(self.embedding, self.vectors, self.lexical, redis)

    async def add(self, key: ConversationKey, texts: list[str], created_at: float) -> None:
        """What the memory worker does for a conversation: index it, mirror it."""
        transcript = stored(texts, created_at)
        await self.indexer.sync(key, transcript)
        await self.user_index.sync(key, transcript)

    def close(self) -> None:
        self.embedding.close()
        self.vectors.close()
        self.lexical.close()


@pytest.fixture
async def memory(redis_client) -> Any:
    m = Memory(redis_client)
    yield m
    m.close()


def key(conversation: str, user: str = "ursula", tenant: str = "acme") -> ConversationKey:
    return ConversationKey(tenant, user, conversation)


async def test_recall_ranks_other_conversations_items_together_with_the_current_ones(memory):
    await memory.add(key("old"), ["We talked about sailing boats.", "ok",
                                  "My sailing boat is called Petrel.", "nice"], 1_000.0)
    await memory.add(key("older"), ["The sailing club meets on Fridays.", "ok"], 500.0)
    await memory.add(key("now"), ["I repaired the sailing boat engine today.", "great",
                                  "Lunch was pasta.", "ok"], 2_000.0)

    recalled = await memory.recaller.recall(key("now"), "sailing boat", k=10)
    texts = [r.text for r in recalled]
    # One ranking: the best matches of both namespaces lead, whatever their conversation
    # (each followed by the turn after it: the replies are left out here).
    hits = [t for t in texts if t not in ("ok", "nice", "great")]
    assert set(hits[:3]) == {"My sailing boat is called Petrel.",
                              "I repaired the sailing boat engine today.",
                              "We talked about sailing boats."}
    # The current conversation's turns come once, from its own namespace (plain ids); the
    # user namespace's items are qualified by their conversation.
    assert texts.count("I repaired the sailing boat engine today.") == 1
    assert not [r for r in recalled if r.id.startswith("now/")]
    assert {r.id.partition("/")[0] for r in recalled if "/" in r.id} == {"old", "older"}
    # Reading order: older conversations first, then the current one, each in its order.
    order = [r.text for r in recalled_in_reading_order(recalled)]
    assert order.index("The sailing club meets on Fridays.") \
        < order.index("We talked about sailing boats.") \
        < order.index("My sailing boat is called Petrel.") \
        < order.index("I repaired the sailing boat engine today.")


async def test_user_namespace_is_searched_only_for_the_user_and_never_another(memory):
    await memory.add(key("a", "victor"), ["Victor's secret word is Zephyr.", "ok"], 1.0)
    await memory.add(key("a", "ursula", "globex"), ["The secret word is Zephyr.", "ok"], 1.0)
    await memory.add(key("a", "-"), ["The secret word is Zephyr.", "ok"], 1.0)
    for other in (key("b"), key("b", "-"), key("b", "victor", "globex")):
        assert await memory.recaller.recall(other, "secret word Zephyr", k=10) == []
    found = await memory.recaller.recall(key("b", "victor"), "secret word Zephyr", k=10)
    assert [r.text for r in found][:1] == ["Victor's secret word is Zephyr."]


async def test_the_learned_ranking_weighs_other_conversations_turns_by_their_neighbours(
        memory):
    answer = "By the red lighthouse, past the fish market."
    await memory.add(key("old"), ["Where is the harbour gate?", answer, "ok", "fine"], 1.0)
    await memory.add(key("old", "victor"), ["Where is the harbour gate?",
                                            "Victor's canary: behind the station.", "ok"], 1.0)
    await memory.add(key("now"), ["Lunch was pasta.", "ok"], 2.0)
    answers = Ranker.of({f: float(f == "answers") for f in FEATURES})
    recalled = await memory.recaller.recall(key("now"), "Where is the harbour gate?", k=1,
                                            ranker=answers)
    # The answer is known to answer through its link to the question, in the user namespace.
    assert [r.text for r in recalled] == [answer]
    assert recalled[0].id.startswith("old/")
    everything = await memory.recaller.recall(key("now"), "Where is the harbour gate?",
                                              k=50, ranker=answers)
    assert not any("canary" in r.text for r in everything)


async def test_recalled_turns_carry_who_said_them_for_the_ranking(memory):
    await memory.add(key("old"), ["My boat is blue.", "A blue boat, noted."], 1.0)
    await memory.add(key("now"), ["The boat is in the harbour.", "Which boat is yours?"], 2.0)
    own = Ranker.of({f: float(f == "own_words") for f in FEATURES})
    recalled = await memory.recaller.recall(key("now"), "What colour is my boat?", k=10,
                                            ranker=own)
    roles = {r.text: r.role for r in recalled}
    assert roles["My boat is blue."] == roles["The boat is in the harbour."] == "user"
    assert roles["A blue boat, noted."] == roles["Which boat is yours?"] == "assistant"
    # A question in the first person: with only this feature, the user's turns lead.
    assert {r.role for r in recalled[:2]} == {"user"}


async def namespaces(redis: Any, conversation: ConversationKey) -> Any:
    async with redis.pipeline(transaction=False) as pipe:
        queue_namespaces(pipe, MemoryKeySpace(), conversation)
        return read_namespaces(conversation, await pipe.execute())


async def test_the_user_namespace_is_searched_only_when_it_holds_another_conversation(memory,
                                                                                      redis_client):
    # Only this conversation mirrored: the user namespace has nothing to offer it (its items
    # would all be left out), so it is not searched; a second conversation makes it count.
    await memory.add(key("a"), ["The harbour gate code is 1312.", "ok"], 1.0)
    assert (await namespaces(redis_client, key("a"))).user is None
    assert (await namespaces(redis_client, key("b"))).user is not None  # "a" is other to "b"
    await memory.add(key("b"), ["Lunch was pasta.", "ok"], 2.0)
    found = await namespaces(redis_client, key("a"))
    assert found.user is not None and found.user_version is not None
    recalled = await memory.recaller.recall(key("b"), "harbour gate code", k=5)
    assert "The harbour gate code is 1312." in [r.text for r in recalled]
    # Deleting "b" from the mirror leaves "a" alone there again.
    await memory.user_index.remove_conversation(key("b"))
    assert (await namespaces(redis_client, key("a"))).user is None


async def test_user_index_sync_is_idempotent_and_follows_deletions(memory, redis_client):
    transcript = stored(["Remember the lighthouse code 4471.", "ok"], 1.0)
    await memory.indexer.sync(key("a"), transcript)
    assert await memory.user_index.sync(key("a"), transcript) == 2
    assert await memory.user_index.sync(key("a"), transcript) == 0
    uk = MemoryKeySpace().user("acme", "ursula")
    assert set(await redis_client.hkeys(uk.recall)) == {qualified_id("a", m.id)
                                                        for m in transcript}
    # A fork that drops the reply: the mirror drops it too.
    await memory.indexer.sync(key("a"), transcript[:1])
    await memory.user_index.sync(key("a"), transcript[:1])
    assert set(await redis_client.hkeys(uk.recall)) == {qualified_id("a", transcript[0].id)}
    assert await redis_client.hlen(uk.recall_vectors) == 1
    assert await memory.user_index.remove_conversation(key("a")) == 1
    assert not await redis_client.exists(uk.recall, uk.recall_vectors,
                                         uk.recall_members("a"))
    assert await memory.recaller.recall(key("b"), "lighthouse code", k=5) == []


async def test_a_sync_writes_again_only_the_chunks_that_changed(memory, redis_client):
    from gateway.core.memory.compaction import SummaryChunk
    from gateway.memory.records.chunk_store import ChunkStore
    texts = ["We moved the pottery class to Thursdays.", "Noted.", "Anna turns 30 in May.", "ok"]
    transcript = stored(texts, 1.0)
    chunks = ChunkStore(redis_client, space=memory.embedding.space)
    first = SummaryChunk(id="c1", text="pottery class on Thursdays",
                         source_ids=tuple(m.id for m in transcript[:2]), first_position=0,
                         last_position=1, start_date=None, end_date=None, tokens=5,
                         created_at=1.0, method="extractive")
    assert await chunks.append(key("a"), first, np.ones(memory.embedding.dim, np.float32))
    await memory.indexer.sync(key("a"), transcript[:2])
    assert await memory.user_index.sync(key("a"), transcript[:2]) == 3  # 2 turns + the chunk
    uk = MemoryKeySpace().user("acme", "ursula")
    version = await redis_client.get(uk.recall_version)
    # A new turn: only it is written; the unchanged chunk is not written again.
    await memory.indexer.sync(key("a"), transcript[:3])
    assert await memory.user_index.sync(key("a"), transcript[:3]) == 1
    assert int(await redis_client.get(uk.recall_version)) == int(version) + 1
    # The chunk rewritten under its id: mirrored again, with its new text.
    rewritten = replace(first, text="pottery class moved to Fridays")
    assert await chunks.replace(key("a"), (first,), (rewritten,))
    await memory.indexer.sync(key("a"), transcript)
    assert await memory.user_index.sync(key("a"), transcript) == 2  # the new turn, the chunk
    assert "Fridays" in await redis_client.hget(uk.recall, qualified_id("a", "chunk:c1"))
    # Another conversation of the user recalls the mirrored chunk, unless chunks are off.
    await memory.add(key("b"), ["Lunch was pasta.", "ok"], 2.0)
    ids = [r.id for r in await memory.recaller.recall(key("b"), "pottery Fridays", k=10)]
    assert qualified_id("a", "chunk:c1") in ids
    ids = [r.id for r in await memory.recaller.recall(key("b"), "pottery Fridays", k=10,
                                                      chunks=False)]
    assert ids and qualified_id("a", "chunk:c1") not in ids
    # Its searches for turns only leave the chunk out before they take their k best.
    from gateway.memory.ports import Namespace
    ns, query = Namespace.of_user("acme", "ursula"), "pottery Fridays"
    vector = np.asarray(await memory.embedding.embed_one(query))
    for search, q in ((memory.vectors.search, vector), (memory.lexical.search, query)):
        everything = await search(ns, q, 100)
        assert qualified_id("a", "chunk:c1") in dict(everything)
        turns = [hit for hit in everything if hit[0] != qualified_id("a", "chunk:c1")]
        assert await search(ns, q, 1, turns_only=True) == turns[:1]
    assert (await memory.lexical.search(ns, query, 1))[0][0] == qualified_id("a", "chunk:c1")


async def test_excluding_a_conversation_masks_it_in_both_indexes(memory):
    await memory.add(key("a"), ["alpha beta gamma", "ok"], 1.0)
    await memory.add(key("b"), ["alpha beta delta", "ok"], 2.0)
    from gateway.memory.ports import Namespace

    ns = Namespace.of_user("acme", "ursula")
    vector = np.asarray(await memory.embedding.embed_one("alpha beta"))
    dense = await memory.vectors.search(ns, vector, 10, excluding="a")
    lexical = await memory.lexical.search(ns, "alpha beta", 10, excluding="a")
    assert dense and lexical
    assert not [i for i, _ in dense + lexical if i.startswith("a/")]


def test_a_conversation_that_fits_is_forwarded_whole_with_nothing_added_or_repeated(
        gateway_url):
    # 15 rounds (30 messages, the replies echoing the questions), well inside the budget:
    # the model gets the conversation itself, no summary, no recalled copy of any of it.
    history = []
    for i in range(15):
        text = f"Round {i}: my favourite number this time is {i * 7}."
        say(gateway_url, text, "fits", "wendy")
        history += [{"role": "user", "content": text}, {"role": "assistant", "content": text}]
    client = openai.OpenAI(base_url=gateway_url + "/v1", api_key=KEYS["acme"], max_retries=0)
    question = {"role": "user", "content": "Which number did I name in round 3?"}
    raw = client.chat.completions.with_raw_response.create(
        model="messages", messages=[question],
        extra_headers=headers("fits", "wendy", persist=False))
    assert forwarded(raw.parse().choices[0].message.content) == [*history, question]
    assert int(raw.headers["x-gateway-tokens-forwarded"]) <= int(
        raw.headers["x-gateway-tokens-original"])


@pytest.mark.parametrize("summary_share, shown", [(0.4, True), (0.0, False)])
def test_the_summary_block_is_shown_only_with_a_summary_share(redis_url,
                                                               summary_share, shown):
    config = gateway_config(redis_url, context={
        "max_context_tokens": 1600, "reserve_completion_tokens": 100,
        "summary_share": summary_share, "recall_share": 0.5})
    with running_gateway(config) as url:
        for i in range(30):  # well past compaction's 5 rounds, and past the budget
            say(url, f"Round {i}: the walk went past mill number {i} and the river bend, "
                     f"where herons wait on the stones near the old ferry landing.", "long", "sam")
        forwarded_text = seen(url, "Where did the walk go?", "long", "sam")
    assert ("<summary>" in forwarded_text) is shown


def test_a_profile_learned_from_this_conversation_alone_is_not_repeated_after_it(redis_url):
    # Without memory briefs (with them, the profile of a conversation's start is in its brief:
    # tests/integration/test_memory_brief.py).
    config = gateway_config(redis_url, tenant={"memory": {"brief_tokens": 0}})
    with running_gateway(config) as gateway_url:
        # The request is in the history forwarded whole: the profile learned from it says it
        # again.
        say(gateway_url, "Please answer in bullet points.", "one", "petra")
        assert "<profile>" not in seen(gateway_url, "And the weather?", "one", "petra")
        # Once another conversation of the user is indexed, the profile may hold what was said
        # there: it is shown after the history.
        say(gateway_url, "I'm new to sailing.", "two", "petra")
        assert "<profile>" in seen(gateway_url, "And the weather?", "one", "petra")


def test_a_tenant_scoped_to_conversations_shows_each_only_its_own_memory(redis_url):
    config = gateway_config(redis_url, tenant={"memory": {"scope": "conversation"}})
    with running_gateway(config) as url:
        say(url, CAT, "a", "ursula")
        say(url, "Please answer in bullet points.", "a", "ursula")
        say(url, "I'm new to sailing.", "b", "ursula")

        other = seen(url, "What is my cat called?", "b", "ursula")
        assert "Quixote" not in other and "bullet points" not in other
        assert "<profile>" not in other and "<memory>" not in other
        assert "Quixote" in seen(url, "What is my cat called?", "a", "ursula")
        # A new conversation of the same user is forwarded as the client sent it.
        question = "What is my cat called? Should I answer in bullet points?"
        assert seen(url, question, "c", "ursula") == question
    import redis

    # Stored as with the default scope: the scope decides what a prompt shows, not what is
    # kept (the memory API lists, exports and erases it).
    with redis.Redis.from_url(redis_url, decode_responses=True) as r:
        assert list(r.scan_iter(match="gw:u:*recall*"))
