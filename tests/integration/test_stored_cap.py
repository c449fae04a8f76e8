"""The stored-messages cap (`request_limits.max_stored_messages`): a conversation past it keeps
answering; its oldest messages, once memory has processed them, move from the live transcript
to the conversation's archive — still exported, recalled and erased, never stored twice.

The real app over HTTP (uvicorn on loopback), a real store, the openai SDK as client; the
reconciliation rules and the archive's store operations are also pinned directly.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
import redis

from gateway.config import hash_key, parse_config
from gateway.core.ids import ConversationKey
from gateway.core.messages import Message, chain
from gateway.core.transcript import TurnRecord, apply_turn, reconcile
from gateway.errors import ConfigError
from gateway.memory.records.keys import MemoryKeySpace
from gateway.store.archive import movable
from gateway.store.codec import decode_stored, encode_stored
from gateway.store.keys import KeySpace
from gateway.store.redis_store import RedisStore
from tests.support.gateway import KEYS, MODELS, forwarded, gateway_config, running_gateway

CAP = 8
USER = "ada-3F"


def _config(redis_url: str, cap: int = CAP) -> Any:
    """Memory on (compaction after two rounds beyond one recent turn), inline recording, and
    acme's conversations capped at `cap` live messages."""
    return gateway_config(
        redis_url, tenant={"memory": {"compaction": {"min_rounds": 2, "recent_window_turns": 1}}},
        per_tenant={"acme": {"request_limits": {"max_stored_messages": cap}}})


@pytest.fixture
def url(redis_url):
    with running_gateway(_config(redis_url)) as base:
        yield base


def _client(url: str, conversation: str, user: str = USER) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=KEYS["acme"], max_retries=0,
                         default_headers={"X-Conversation-Id": conversation,
                                          "X-User-Id": user})


def _say(client: openai.OpenAI, history: list[dict[str, Any]], text: str,
         model: str = "echo") -> str:
    """A stateless client's turn: the whole history plus `text`; the reply is appended."""
    history.append({"role": "user", "content": text})
    reply = client.chat.completions.create(model=model, messages=history)
    content = reply.choices[0].message.content
    history.append({"role": "assistant", "content": content})
    return content


def _keys(conversation: str, user: str = USER):
    return KeySpace().conversation(ConversationKey("acme", user, conversation))


def _stored(redis_url: str, conversation: str, user: str = USER) -> tuple[list, list]:
    """(archive, live transcript) as stored, decoded."""
    ck = _keys(conversation, user)
    with redis.Redis.from_url(redis_url, decode_responses=True) as r:
        return ([decode_stored(x) for x in r.lrange(ck.archive, 0, -1)],
                [decode_stored(x) for x in r.lrange(ck.transcript, 0, -1)])


def _contents(messages) -> list[tuple[str, str]]:
    return [(m.message.role, m.message.text) for m in messages]


def _api(url: str, method: str, path: str, user: str = USER) -> httpx.Response:
    return httpx.request(method, url + "/v1/memory" + path, timeout=30,
                         headers={"Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": user})


def test_a_conversation_past_its_cap_keeps_answering_and_archives_its_oldest_messages(
        url, redis_url):
    client, history = _client(url, "long"), []
    for i in range(12):
        assert _say(client, history, f"Turn {i} is about the colour number {i}.") \
            == f"Turn {i} is about the colour number {i}."
    archive, live = _stored(redis_url, "long")
    assert archive, "nothing was archived past the cap"
    assert CAP <= len(live) <= CAP + 2  # at most one turn beyond the cap, never below it
    assert live[0].message.role == "user" and live[0].parent_id == archive[-1].id
    # Nothing lost, nothing twice: archive + live is the client's history, in order, chained.
    assert _contents(archive + live) == [(m["role"], m["content"]) for m in history]
    assert [m.id for m in archive + live] == [m.id for m in chain(
        None, tuple(Message.from_openai(m) for m in history))]
    conversation = _api(url, "GET", "/conversations/long").json()
    assert [(m["message"]["role"], m["message"]["content"]) for m in conversation["messages"]] \
        == [(m["role"], m["content"]) for m in history]
    assert conversation["branches"] == [] and conversation["message_count"] == 24
    # Memory's positions count from the conversation's start: the first summary chunk still
    # covers the first (archived) turn, and was not made again after the move.
    chunks = _api(url, "GET", "/conversations/long/chunks").json()["data"]
    assert chunks[0]["first_position"] == 0
    assert chunks[0]["sources"][0]["content"] == "Turn 0 is about the colour number 0."
    assert len({c["id"] for c in chunks}) == len(chunks)
    # The turn index, its watermark and the processed mark count from the start too: the
    # newest message sits at its place in the whole history, not in the live transcript.
    mk = MemoryKeySpace().conversation(ConversationKey("acme", USER, "long"))
    with redis.Redis.from_url(redis_url, decode_responses=True) as r:
        assert int(r.get(mk.watermark)) == 24
        assert r.get(mk.processed) == f"24:{live[-1].id}"
        assert json.loads(r.hget(mk.turns, live[-1].id))["position"] == 23
        assert json.loads(r.hget(mk.turns, archive[0].id))["position"] == 0
    export = _api(url, "GET", "/export").json()
    (exported,) = export["conversations"]
    assert len(exported["messages"]) == 24


def test_a_stateless_resend_after_archiving_stores_nothing_twice(url, redis_url):
    client, history = _client(url, "resend"), []
    for i in range(10):
        _say(client, history, f"Resend turn {i}.")
    archive, _live = _stored(redis_url, "resend")
    assert archive
    # The same whole history again (a retry of the last turn's request, say): nothing new.
    client.chat.completions.create(model="echo", messages=history[:-1])
    client.chat.completions.create(model="echo", messages=history + [
        {"role": "user", "content": "One more."}])
    archive2, live2 = _stored(redis_url, "resend")
    assert _contents(archive2 + live2) == [(m["role"], m["content"]) for m in history] + [
        ("user", "One more."), ("assistant", "One more.")]
    with redis.Redis.from_url(redis_url, decode_responses=True) as r:
        # The retry regenerated the last reply, equal to the stored one: no branch either.
        assert r.llen(_keys("resend").branches) == 0


def test_a_stateful_client_keeps_working_after_its_start_is_archived(url, redis_url):
    client, history = _client(url, "stateful"), []
    for i in range(6):
        _say(client, history, f"Stateful turn {i}.")
    for i in range(6, 10):  # only the new message, as a stateful client sends
        client.chat.completions.create(model="echo", messages=[
            {"role": "user", "content": f"Stateful turn {i}."}])
    archive, live = _stored(redis_url, "stateful")
    assert archive
    assert [t for r, t in _contents(archive + live) if r == "user"] == [
        f"Stateful turn {i}." for i in range(10)]
    assert len(archive + live) == 20


def test_recall_still_finds_an_archived_turn(url, redis_url):
    client, history = _client(url, "recall"), []
    _say(client, history, "My locker code word is Zanzibar.")
    for i in range(8):
        _say(client, history, f"Filler message {i} about weather and tea.")
    archive, live = _stored(redis_url, "recall")
    assert "My locker code word is Zanzibar." in [m.message.text for m in archive]
    assert "Zanzibar" not in " ".join(m.message.text for m in live)
    # A stateful question: the model sees the archived turn because memory recalls it.
    reply = client.chat.completions.create(model="messages", messages=[
        {"role": "user", "content": "What is my locker code word?"}])
    seen = forwarded(reply.choices[0].message.content)
    assert any("Zanzibar" in str(m["content"]) for m in seen[:-1])
    # The turn index still holds it, with the turn after it linked.
    first = next(m for m in archive if m.message.text.startswith("My locker"))
    mk = MemoryKeySpace().conversation(ConversationKey("acme", USER, "recall"))
    with redis.Redis.from_url(redis_url, decode_responses=True) as r:
        assert r.hexists(mk.turns, first.id) and r.hget(mk.following, first.id)


def test_a_turn_memory_has_not_processed_is_never_archived(url, redis_url):
    response = httpx.patch(url + "/v1/memory/settings", json={"memory": False}, timeout=30,
                           headers={"Authorization": f"Bearer {KEYS['acme']}",
                                    "X-User-Id": USER})
    assert response.status_code == 200, response.text
    client, history = _client(url, "unprocessed"), []
    for i in range(8):
        _say(client, history, f"Unprocessed turn {i}.")
    archive, live = _stored(redis_url, "unprocessed")
    assert archive == [] and len(live) == 16  # memory never processed them: all stay live
    httpx.patch(url + "/v1/memory/settings", json={"memory": True}, timeout=30,
                headers={"Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": USER})
    _say(client, history, "Now memory is on again.")
    archive, live = _stored(redis_url, "unprocessed")
    assert archive and len(live) <= CAP + 2
    mk = MemoryKeySpace().conversation(ConversationKey("acme", USER, "unprocessed"))
    with redis.Redis.from_url(redis_url, decode_responses=True) as r:
        indexed = set(r.hkeys(mk.turns))
        processed = int(r.get(mk.processed).partition(":")[0])
    assert {m.id for m in archive} <= indexed  # each archived turn is recallable
    assert len(archive) < processed


def test_deleting_the_conversation_or_erasing_the_user_removes_the_archive(url, redis_url):
    for conversation in ("gone-1", "gone-2"):
        client, history = _client(url, conversation), []
        for i in range(8):
            _say(client, history, f"{conversation} turn {i}.")
    with redis.Redis.from_url(redis_url, decode_responses=True) as r:
        assert r.llen(_keys("gone-1").archive) and r.llen(_keys("gone-2").archive)
        assert _api(url, "DELETE", "/conversations/gone-1").status_code == 200
        assert not r.exists(_keys("gone-1").archive) and r.exists(_keys("gone-2").archive)
        assert _api(url, "DELETE", "").status_code == 200
        assert not r.exists(_keys("gone-2").archive)
        assert not [n for n in r.scan_iter() if "gone-" in n and n.endswith(":archive")]


def test_a_history_that_differs_inside_the_archived_part_appends_only_its_current_turn(
        url, redis_url):
    client, history = _client(url, "diverge"), []
    for i in range(8):
        _say(client, history, f"Diverge turn {i}.")
    archive, live = _stored(redis_url, "diverge")
    edited = [{"role": "user", "content": "An edited first message."}, *history[1:]]
    reply = client.chat.completions.create(model="messages", messages=edited + [
        {"role": "user", "content": "After the edit."}])
    # The client's version is what the model sees this time...
    assert forwarded(reply.choices[0].message.content)[0]["content"] == \
        "An edited first message."
    archive2, live2 = _stored(redis_url, "diverge")
    # ...while the archived part is never rewritten: only the current turn is appended.
    assert _contents(archive2 + live2)[:len(history)] == _contents(archive + live)
    assert _contents(archive2 + live2)[len(history)][1] == "After the edit."
    assert len(archive2 + live2) == len(history) + 2


def test_a_turn_with_more_new_messages_than_the_cap_is_a_400(url, redis_url):
    client = _client(url, "too-many")
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"}
                for i in range(CAP + 1)]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="echo", messages=messages)
    assert info.value.param == "messages" and info.value.code == "too_many_new_messages"
    assert "max_stored_messages" in info.value.message
    with redis.Redis.from_url(redis_url, decode_responses=True) as r:
        assert not r.exists(_keys("too-many").transcript, _keys("too-many").pending)
    # Another tenant's (default) cap takes it.
    ok = httpx.post(url + "/v1/chat/completions", timeout=30,
                    json={"model": "echo", "messages": messages},
                    headers={"Authorization": f"Bearer {KEYS['globex']}",
                             "X-Conversation-Id": "too-many"})
    assert ok.status_code == 200


@pytest.mark.parametrize("where, value, message", [
    ({"request_limits": {"max_stored_messages": 0}}, None,
     "request_limits.max_stored_messages"),
    (None, {"request_limits": {"max_stored_messages": "many"}},
     "tenants.acme.request_limits.max_stored_messages"),
])
def test_a_bad_max_stored_messages_is_refused_naming_the_key(where, value, message):
    with pytest.raises(ConfigError) as info:
        parse_config({"store": "redis://127.0.0.1:1/0", **(where or {}),
                      "tenants": {"acme": {"api_keys": [{"sha256": hash_key("k")}],
                                           "models": MODELS, **(value or {})}}})
    assert message in str(info.value)


# -- the rules, directly -------------------------------------------------------------------------

def _messages(n: int) -> tuple[Message, ...]:
    return tuple(Message.from_openai({"role": "user" if i % 2 == 0 else "assistant",
                                      "content": f"m{i}"}) for i in range(n))


def test_reconcile_aligns_a_resent_history_on_the_first_live_message():
    whole = chain(None, _messages(10))
    live = whole[4:]  # four archived
    incoming = _messages(10) + (Message.from_openai({"role": "user", "content": "new"}),)
    r = reconcile(incoming, live)
    assert (r.kind, r.mode, r.parent_id) == ("stateless", "after", whole[-1].id)
    assert r.new == incoming[10:] and r.conversation == incoming
    assert r.conversation_ids[:10] == tuple(m.id for m in whole)
    # A client that only resends from the live start reconciles the same way.
    assert reconcile(incoming[4:], live).new == incoming[10:]


def test_a_turn_from_the_start_is_appended_once_the_start_is_archived():
    live = chain(None, _messages(10))[4:]
    record = TurnRecord("after", None, _messages(2))
    edit = apply_turn(live, record)
    assert edit.keep == len(live) and edit.append[0].parent_id == live[-1].id


def test_only_processed_messages_move_and_the_transcript_starts_at_a_user_message():
    branch = chain(None, _messages(10))
    assert movable(branch, 5) == 4          # m4 is a user message; m5 is not
    assert movable(branch, 0) == 0 and movable(branch, -3) == 0
    assert movable(branch[:3], 9) == 2      # never beyond what memory processed
    assert movable(branch[:1], 9) == 0


async def test_after_a_move_a_load_decodes_only_what_is_new(redis_client):
    store = RedisStore(redis_client)
    key = ConversationKey("acme", USER, "cache")
    ck = store.keys.conversation(key)
    whole = chain(None, _messages(12))
    await redis_client.rpush(ck.transcript, *(encode_stored(m) for m in whole))
    assert await store.load(key) == whole
    misses = store.cache.misses
    assert await store.archive.trim(key, whole, cap=5) == 6  # down to m6, a user message
    assert await store.load(key) == whole[6:]
    assert await store.applied(key) == whole  # memory's view: the whole branch
    await redis_client.rpush(ck.transcript, encode_stored(chain(whole[-1].id, _messages(1))[0]))
    assert len(await store.load(key)) == 7
    assert store.cache.misses == misses  # neither the move nor the append re-read it all
    assert await store.history(key) == await store.applied(key)
    # A branch that is not the stored one (a fork since memory read it) moves nothing.
    assert await store.archive.trim(key, chain(None, _messages(13)[::-1]), cap=1) == 0


async def test_a_sealed_transcript_moves_sealed_and_reads_back_whole(redis_client):
    from gateway.store.encryption.crypto import DataKey, Encryption, TenantCipher

    encryption = Encryption({"acme": TenantCipher("acme", DataKey(bytes(range(32))))})
    store = RedisStore(redis_client, encryption=encryption)
    key = ConversationKey("acme", USER, "sealed")
    ck = store.keys.conversation(key)
    whole = chain(None, _messages(12))
    await redis_client.rpush(ck.transcript, *(encryption.seal("acme", encode_stored(m))
                                              for m in whole))
    assert await store.archive.trim(key, whole, cap=5) == 6
    archived = await redis_client.lrange(ck.archive, 0, -1)
    assert len(archived) == 6 and not any("\"role\"" in raw for raw in archived)  # sealed
    assert await store.applied(key) == whole and await store.history(key) == whole
    # A reader with a fresh cache (another replica) sees the same.
    assert await RedisStore(redis_client, encryption=encryption).applied(key) == whole
