"""Erasing a user (`DELETE /v1/memory`) leaves nothing of them in the store, and nothing of
theirs comes back: not the turns still queued, not turns held back while the store was down,
not a recorder or memory worker caught mid-way. Other users and tenants are untouched."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import httpx
import pytest

from gateway.config import hash_key, parse_config
from gateway.core.ids import ConversationKey
from gateway.core.messages import Message
from gateway.core.transcript import TurnRecord
from gateway.memory.records.keys import MemoryKeySpace
from gateway.memory.jobs.worker import MemoryWorker
from gateway.store import EmbeddedRedis, RedisStore
from gateway.store.recording import Recorder
from gateway.store.codec import encode_key
from gateway.store.keys import KeySpace
from gateway.store.redis_store import ERASED_TTL_MS
from tests.support.gateway import KEYS, MODELS, running_gateway
from tests.support.store_dump import dump

ERIN, BOB = "erin-7Q", "bob-5K"
CANARY = {("acme", ERIN): "Zorblax", ("acme", BOB): "Quillon", ("globex", ERIN): "Vextra"}


def memory_config(redis_url: str, headers: dict[str, dict[str, str]] | None = None):
    """The real app, inline recording, and compaction after two rounds beyond one recent turn
    (so a handful of turns makes summary chunks); `headers`: per tenant header names."""
    memory = {"compaction": {"min_rounds": 2, "recent_window_turns": 1}}
    tenant = {"models": MODELS, "memory": memory,
              "context": {"max_context_tokens": 2000, "reserve_completion_tokens": 200}}
    return parse_config({
        "store": redis_url, "recorder": {"mode": "inline"},
        "memory": {"embedder": {"kind": "hash"}},
        "tenants": {name: {**tenant, "api_keys": [{"sha256": hash_key(key)}],
                           "headers": (headers or {}).get(name, {})}
                    for name, key in KEYS.items()}})


def chat(url: str, tenant: str, user: str, conversation: str,
         messages: list[dict[str, Any]]) -> dict[str, Any]:
    response = httpx.post(url + "/v1/chat/completions", timeout=30,
                          json={"model": "echo", "messages": messages},
                          headers={"Authorization": f"Bearer {KEYS[tenant]}",
                                   "X-User-Id": user, "X-Conversation-Id": conversation})
    assert response.status_code == 200, response.text
    # Without the reply's null fields (`refusal`): resent with them, each turn would fork.
    return {k: v for k, v in response.json()["choices"][0]["message"].items() if v is not None}


def converse(url: str, tenant: str, user: str, conversation: str,
             texts: list[str]) -> list[dict[str, Any]]:
    """A stateless client: resends the whole history every call; returns it."""
    history: list[dict[str, Any]] = []
    for text in texts:
        history.append({"role": "user", "content": text})
        history.append(chat(url, tenant, user, conversation, history))
    return history


def populate(url: str, tenant: str, user: str) -> None:
    """Facts, profile, two conversations with summary chunks, and a fork (a branch)."""
    word = CANARY[(tenant, user)]
    history = converse(url, tenant, user, "c-one", [
        f"My name is {word} Canary.", f"I live in {word}ville.",
        *(f"{word} note {i}: the {word} garden needs water on day {i}." for i in range(5))])
    # A client that edits its third message forks the conversation: the old tail is archived.
    chat(url, tenant, user, "c-one", [*history[:4], {"role": "user",
                                                      "content": f"Edited {word} question."}])
    converse(url, tenant, user, "c-two", [f"{word} second chat, turn {i}." for i in range(4)])


def owned_by(name: str, tenant: str, user: str) -> bool:
    scope = f"{len(tenant)}:{tenant}:{len(user)}:{user}:"
    return scope in name


def mentions(value: Any, word: str) -> bool:
    return word.lower() in repr(value).lower()


def test_erase_leaves_nothing_of_the_user_and_nothing_of_others_changes(redis_url):
    with running_gateway(memory_config(redis_url)) as url:
        for tenant, user in CANARY:
            populate(url, tenant, user)
        before = dump(redis_url)
        erin = ConversationKey("acme", ERIN, "c-one")
        # Everything the erase must reach exists: facts, vectors, profile, chunks, branches.
        mk, uk = MemoryKeySpace().conversation(erin), MemoryKeySpace().user("acme", ERIN)
        assert {uk.facts, uk.fact_vectors, uk.profile, mk.chunks, mk.turns,
                KeySpace().conversation(erin).branches, uk.recall, uk.recall_vectors,
                uk.recall_synced, uk.recall_members("c-one")} <= set(before)
        assert mentions(before[mk.chunks], "zorblax")
        assert mentions(before[uk.recall], "zorblax")  # the user-level recall index
        assert mentions(before[uk.facts], "Zorblax Canary")
        others = {n: v for n, v in before.items()
                  if owned_by(n, "acme", BOB) or owned_by(n, "globex", ERIN)}
        _dead_letters_and_a_queued_turn(redis_url, erin)

        response = httpx.delete(url + "/v1/memory", timeout=30, headers={
            "Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": ERIN})
        assert response.status_code == 200, response.text
        assert response.json()["complete"] is True
        assert response.json()["keys_deleted"] > 10

        after = dump(redis_url)
        assert not [n for n in after if owned_by(n, "acme", ERIN)]
        assert all(owned_by(n, "globex", ERIN) for n in after if ERIN in n)
        assert not [n for n, v in after.items() if mentions(v, "zorblax") or
                    mentions(n, "zorblax")]
        assert {n: after.get(n) for n in others} == others
        for word in ("Quillon", "Vextra"):
            assert any(mentions(v, word) for v in after.values())

        # A later request runs the recorder and the memory worker: nothing comes back.
        converse(url, "acme", BOB, "c-three", ["Quillon third chat."])
        assert not [n for n, v in dump(redis_url).items()
                    if owned_by(n, "acme", ERIN) or mentions(v, "zorblax")]


def test_deleting_a_conversation_leaves_nothing_of_it_in_the_users_recall_index(redis_url):
    with running_gateway(memory_config(redis_url)) as url:
        converse(url, "acme", ERIN, "c-gone", [
            f"Glimmer note {i}: the Glimmer vault opens on day {i}." for i in range(5)])
        converse(url, "acme", ERIN, "c-kept", [f"Zorblax kept chat, turn {i}." for i in range(4)])
        uk = MemoryKeySpace().user("acme", ERIN)
        recall = dump(redis_url)[uk.recall]
        # Turns and summary chunks of both conversations reached the user-level index.
        assert any('"kind":"chunk"' in v and mentions(v, "glimmer") for v in recall.values())
        assert any(mentions(v, "glimmer vault opens on day 4") for v in recall.values())
        assert any(mentions(v, "zorblax kept") for v in recall.values())

        response = httpx.delete(url + "/v1/memory/conversations/c-gone", timeout=30, headers={
            "Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": ERIN})
        assert response.status_code == 200, response.text

        after = dump(redis_url)
        assert not [n for n, v in after.items() if mentions(v, "glimmer") or mentions(v, "c-gone")]
        assert not [n for n in after if "c-gone" in n]  # no key keeps its id, not even seqs
        assert any(mentions(v, "zorblax kept") for v in after[uk.recall].values())


def test_a_deleted_conversation_leaves_no_id_behind_only_a_hashed_tombstone(redis_url):
    import redis

    from tests.support.console import console_config

    gone = KeySpace().conversation(ConversationKey("acme", ERIN, "c-gone"))
    log = KeySpace().request_log("acme")
    with running_gateway(console_config(redis_url)) as url, \
            redis.Redis.from_url(redis_url, decode_responses=True) as r:
        converse(url, "acme", ERIN, "c-gone", ["Glimmer one.", "Glimmer two."])
        converse(url, "acme", ERIN, "c-kept", ["Zorblax kept."])

        def logged() -> set[str]:
            return {f["conversation"] for _, f in r.xrange(log)}

        deadline = time.monotonic() + 10  # the request log is written in the background
        while logged() != {"c-gone", "c-kept"}:
            assert time.monotonic() < deadline, logged()
            time.sleep(0.05)
        assert r.get(gone.deleted) is None

        response = httpx.delete(url + "/v1/memory/conversations/c-gone", timeout=30, headers={
            "Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": ERIN})
        assert response.status_code == 200, response.text
        assert logged() == {"c-kept"}
        assert not [n for n in r.scan_iter() if "c-gone" in n]  # not even its seq counters
        # What is left: its tombstone, named by a hash, holding the time of the delete.
        assert "c-gone" not in gone.deleted and ERIN not in gone.deleted
        assert abs(int(r.get(gone.deleted)) / 1000 - time.time()) < 60
        assert 0 < r.pttl(gone.deleted) <= ERASED_TTL_MS

        # The id may start a new conversation: its turns are new, so they are kept.
        history = converse(url, "acme", ERIN, "c-gone", ["A new start."])
        listed = httpx.get(url + "/v1/memory/conversations/c-gone", timeout=30, headers={
            "Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": ERIN}).json()
        assert [m["message"]["content"] for m in listed["messages"]] == [
            m["content"] for m in history]
        assert int(r.get(gone.seq)) == 1


def test_a_turn_read_before_its_conversation_was_deleted_never_brings_it_back(redis_url):
    """A recorder that read a job before the delete applies it after: the tombstone drops it,
    and a new conversation under the same id keeps its own turns."""
    import asyncio

    from gateway.store import connect

    key = ConversationKey("acme", ERIN, "c-race")

    async def scenario() -> tuple[list[str], int]:
        client = connect(redis_url)
        try:
            store = RedisStore(client)
            recorder = Recorder(client, workers=1, consumer_prefix="race")
            await recorder.ensure_group()
            old = TurnRecord("append", None, (Message.of("user", "Glimmer before."),),
                             created_at=time.time() - 1, request_id="old")
            await store.record(key, old)
            # The recorder reads the job (it is now pending for it) but has not applied it.
            await client.xreadgroup(KeySpace().group, recorder.consumers[0],
                                    {KeySpace().records: ">"}, count=10)
            await store.delete(key)
            # The conversation's id is used again: a new turn, seq 1 again.
            new = TurnRecord("append", None, (Message.of("user", "Fresh after."),),
                             created_at=time.time() + 0.01, request_id="new")
            await store.record(key, new)
            # A turn created before the delete, held back by a record buffer, comes late.
            assert await store.record(key, TurnRecord(
                "append", None, (Message.of("user", "Glimmer held back."),),
                created_at=time.time() - 2, request_id="late")) == ""
            applied = await recorder.process_available()
            return [m.message.text for m in await store.applied(key)], applied
        finally:
            await client.aclose()

    texts, applied = asyncio.run(scenario())
    assert texts == ["Fresh after."]
    assert applied == 2  # the old job, dropped, and the new one


def _dead_letters_and_a_queued_turn(redis_url: str, key: ConversationKey) -> None:
    import redis

    with redis.Redis.from_url(redis_url, decode_responses=True) as r:
        r.xadd(KeySpace().dead, {"tenant": key.tenant, "user": key.user,
                                 "conversation": key.conversation, "seq": "9",
                                 "payload": '{"text": "Zorblax dead letter"}', "error": "boom"})
        r.hset("gw:memory:dead", encode_key(key), "RuntimeError('Zorblax failed')")
        # Another user's dead letters stay.
        r.xadd(KeySpace().dead, {"tenant": "acme", "user": BOB, "conversation": "c-one",
                                 "seq": "9", "payload": "Quillon dead", "error": "boom"})
    # A turn enqueued and not yet applied (the inline recorder runs on the next request).
    import asyncio

    from gateway.store import connect

    async def enqueue() -> None:
        client = connect(redis_url)
        try:
            await RedisStore(client).record(key, TurnRecord("append", None, (
                Message.of("user", "Zorblax queued"),), created_at=time.time()))
        finally:
            await client.aclose()
    asyncio.run(enqueue())


KEY = ConversationKey("acme", ERIN, "c1")


def turn(text: str, created_at: float) -> TurnRecord:
    return TurnRecord("append", None, (Message.of("user", text),
                                       Message.of("assistant", "ok")), created_at=created_at)


async def user_keys(redis_client) -> list[str]:
    return [n async for n in redis_client.scan_iter(count=1000) if owned_by(n, "acme", ERIN)]


async def test_a_queued_turn_created_before_the_erase_is_never_applied_nor_loaded(
        redis_client):
    store, recorder = RedisStore(redis_client), Recorder(redis_client, consumer_prefix="t")
    await store.record(KEY, turn("Zorblax queued", time.time() - 1))
    await store.mark_erased(KEY.tenant, KEY.user)
    assert await store.load(KEY) == ()
    # The erase's key sweep would delete the pending turn; here only the tombstone stops it.
    assert await recorder.process_available() == 1
    assert await redis_client.xlen(KeySpace().records) == 0
    assert not await redis_client.exists(KeySpace().conversation(KEY).transcript,
                                         KeySpace().memory_dirty)


async def test_a_buffered_turn_created_before_the_erase_is_not_enqueued(redis_client):
    store = RedisStore(redis_client)
    await store.mark_erased(KEY.tenant, KEY.user)
    assert await store.record(KEY, turn("Zorblax held back", time.time() - 5)) == ""
    assert await user_keys(redis_client) == []
    assert await redis_client.xlen(KeySpace().records) == 0


async def test_turns_after_the_erase_are_recorded_and_remembered_again(redis_client):
    store, recorder = RedisStore(redis_client), Recorder(redis_client, consumer_prefix="t")
    await store.mark_erased(KEY.tenant, KEY.user)
    time.sleep(0.01)
    await store.record(KEY, turn("fresh start", time.time()))
    await recorder.process_available()
    assert [m.message.text for m in await store.load(KEY)] == ["fresh start", "ok"]


class Recording:
    name = "recording"

    def __init__(self) -> None:
        self.updates: list[Any] = []

    async def process(self, update: Any) -> None:
        self.updates.append(update)


async def test_the_memory_worker_writes_nothing_for_an_erased_user(redis_client):
    processor = Recording()
    worker = MemoryWorker(redis_client, [processor])
    await RedisStore(redis_client).mark_erased(KEY.tenant, KEY.user)
    # A dirty mark that outlived the erase (a compactor re-marking its conversation).
    await redis_client.zadd(KeySpace().memory_dirty, {encode_key(KEY): time.time() - 1})
    assert await worker.process_available() == 1
    assert processor.updates == []
    assert await user_keys(redis_client) == []
    assert not await redis_client.exists(KeySpace().memory_dirty)


async def test_the_tombstone_does_not_name_the_user(redis_client):
    await RedisStore(redis_client).mark_erased(KEY.tenant, KEY.user)
    (name,) = [n async for n in redis_client.scan_iter()]
    assert ERIN not in name and ERIN not in await redis_client.get(name)
    assert 0 < await redis_client.pttl(name)


@pytest.mark.parametrize("tenant", ["acme", "globex"])
def test_erasing_a_user_who_has_nothing_succeeds(redis_url, tenant):
    with running_gateway(memory_config(redis_url)) as url:
        response = httpx.delete(url + "/v1/memory", headers={
            "Authorization": f"Bearer {KEYS[tenant]}", "X-User-Id": "nobody"})
    assert response.status_code == 200
    assert response.json()["keys_deleted"] == 0


async def test_erase_waits_for_a_memory_run_under_way_then_sweeps_what_it_wrote(redis_client):
    from gateway.memory.erasure import MemoryErasure

    memory = MemoryKeySpace().conversation(KEY)
    control = MemoryErasure(redis_client, RedisStore(redis_client), settle_seconds=5)
    await redis_client.set(memory.lock, "worker-token", px=300)  # a run ending in 0.3 s
    await redis_client.set(memory.chunks, "Zorblax written before the erase")
    started = time.monotonic()
    erasure = await control.erase(KEY.tenant, KEY.user)
    assert erasure.complete and time.monotonic() - started >= 0.2
    assert await user_keys(redis_client) == []


async def test_erase_reports_a_run_that_outlasts_its_wait_as_incomplete(redis_client):
    from gateway.memory.erasure import MemoryErasure

    memory = MemoryKeySpace().conversation(KEY)
    control = MemoryErasure(redis_client, RedisStore(redis_client), settle_seconds=0.1)
    await redis_client.set(memory.lock, "worker-token", px=60_000)
    erasure = await control.erase(KEY.tenant, KEY.user)
    assert not erasure.complete
    assert await user_keys(redis_client) == []  # the lock too: a second erase finds nothing


def _files_mentioning(directory: Path, word: str) -> list[str]:
    """The files under `directory` holding `word`. A file the store removes between the listing
    and the read (an AOF rewrite drops the old increment files) holds nothing any more."""
    needle = word.encode()
    found = []
    for path in directory.rglob("*"):
        try:
            if path.is_file() and needle in path.read_bytes():
                found.append(str(path.relative_to(directory)))
        except FileNotFoundError:
            continue
    return sorted(found)


def _rewritten(client: Any) -> bool:
    info = client.info("persistence")
    return not (int(info["aof_rewrite_in_progress"]) or int(info["aof_rewrite_scheduled"]))


def test_an_erase_rewrites_the_stores_files_on_disk(tmp_path):
    # A store of its own, to read its data directory (append-only persistence, as the
    # embedded default runs it). The canary must be on disk first, or the test proves nothing.
    import redis

    server = EmbeddedRedis(tmp_path / "store", die_with_parent=True)
    server.start()
    try:
        with running_gateway(memory_config(server.url)) as url, \
                redis.Redis.from_url(server.url) as client:
            populate(url, "acme", ERIN)
            populate(url, "acme", BOB)
            deadline = time.monotonic() + 10
            while not _files_mentioning(server.data_dir, "Zorblax"):  # fsync'd every second
                assert time.monotonic() < deadline, "the canary never reached the disk"
                time.sleep(0.1)

            response = httpx.delete(url + "/v1/memory", timeout=30, headers={
                "Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": ERIN})
            assert response.status_code == 200, response.text
            assert response.json()["disk"] in ("rewritten", "pending")
            deadline = time.monotonic() + 30
            while not _rewritten(client) or _files_mentioning(server.data_dir, "Zorblax"):
                assert time.monotonic() < deadline, (
                    "erased text still on disk: "
                    f"{_files_mentioning(server.data_dir, 'Zorblax')}")
                time.sleep(0.1)
            assert _files_mentioning(server.data_dir, "Quillon")  # others' data is kept
    finally:
        server.stop()


def _chat_anonymous(url: str, conversation: str, text: str) -> None:
    response = httpx.post(url + "/v1/chat/completions", timeout=30,
                          json={"model": "echo", "messages": [{"role": "user", "content": text}]},
                          headers={"Authorization": f"Bearer {KEYS['acme']}",
                                   "X-Conversation-Id": conversation})
    assert response.status_code == 200, response.text


BURST_CANARIES = {"erase": "Zorblax", "c-one": "Plimsoq", "c-two": "Trevanq",
                  "c-three": "Muldrek", "anon-1": "Ostravk", "anon-2": "Kelvanth"}
"""What each delete of the burst takes away (the erased user, BOB's conversations, the
anonymous ones), each word in no other text."""


def populate_for_a_burst(url: str) -> None:
    """ERIN's memory (to erase), BOB's three conversations to delete and one to keep
    (`Quillon`), two anonymous conversations: each with its canary of BURST_CANARIES."""
    populate(url, "acme", ERIN)  # erased: facts, profile, chunks, a branch
    for conversation in ("c-one", "c-two", "c-three"):
        word = BURST_CANARIES[conversation]
        converse(url, "acme", BOB, conversation,
                 [f"{word} fact {i}: the {word} bridge opens at {i}." for i in range(3)])
    converse(url, "acme", BOB, "c-kept", ["Quillon stays: the Quillon harbour."])
    for conversation in ("anon-1", "anon-2"):
        _chat_anonymous(url, conversation, f"{BURST_CANARIES[conversation]} anonymous.")


def delete_in_a_burst(url: str, answered: Callable[[], None]) -> None:
    """The erase, three conversation deletes and two anonymous ones at once, beside a client
    that keeps writing; `answered` runs once they have all answered (the writer still going).
    Every answer is a 200 saying where the disk stands."""
    stop = threading.Event()
    written: list[int] = []

    def keep_writing() -> None:
        while not stop.is_set():
            converse(url, "acme", BOB, f"w-{len(written)}", ["Quillon writes on."])
            written.append(1)

    auth = {"Authorization": f"Bearer {KEYS['acme']}"}
    deletes = [("/v1/memory", {"X-User-Id": ERIN}),
               *((f"/v1/memory/conversations/{c}", {"X-User-Id": BOB})
                 for c in ("c-one", "c-two", "c-three")),
               *((f"/v1/memory/conversations/{c}", {}) for c in ("anon-1", "anon-2"))]
    with ThreadPoolExecutor(len(deletes) + 1) as pool:
        writer = pool.submit(keep_writing)
        answers = list(pool.map(lambda d: httpx.delete(
            url + d[0], headers={**auth, **d[1]}, timeout=60), deletes))
        answered()
        stop.set()
        writer.result()
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert answer.json()["disk"] in ("rewritten", "pending"), answer.text
    assert written  # the deletes ran beside writes


def wait_until_no_canary(files_mentioning: Callable[[str], list[str]]) -> None:
    """Every canary of BURST_CANARIES gone from the files within 30 s; the kept data not."""
    deadline = time.monotonic() + 30
    while left := {w: files for w in BURST_CANARIES.values() if (files := files_mentioning(w))}:
        assert time.monotonic() < deadline, f"deleted text still on disk: {left}"
        time.sleep(0.2)
    assert files_mentioning("Quillon")  # kept data stays


def test_deletes_in_a_burst_during_a_rewrite_leave_no_canary_on_disk(tmp_path):
    # The case: deletes made while a rewrite runs (its fork holds the text) were taken
    # as merged into a later rewrite, and none followed. Here a rewrite is made slow and
    # started before the burst, so every delete meets one in progress; the burst (an erase,
    # three conversations, two anonymous ones, at once) runs beside a client that keeps
    # writing. Every file of the data directory must lose every canary within 30 s.
    import redis

    server = EmbeddedRedis(tmp_path / "store", die_with_parent=True)
    server.start()
    try:
        with running_gateway(memory_config(server.url)) as url, \
                redis.Redis.from_url(server.url, decode_responses=True) as client:
            populate_for_a_burst(url)
            deadline = time.monotonic() + 10
            while missing := [w for w in BURST_CANARIES.values()
                              if not _files_mentioning(server.data_dir, w)]:
                assert time.monotonic() < deadline, f"never reached the disk: {missing}"
                time.sleep(0.1)

            # A rewrite forked now holds every canary; slowed (per key), it is still running
            # when the deletes come.
            client.config_set("rdb-key-save-delay", 20_000)
            client.bgrewriteaof()
            assert int(client.info("persistence")["aof_rewrite_in_progress"]) == 1
            # the rewrites after it: quick
            delete_in_a_burst(url, lambda: client.config_set("rdb-key-save-delay", 0))
            wait_until_no_canary(lambda w: _files_mentioning(server.data_dir, w))
            # The last round's end, bounded on its own: the canaries' 30 s (the target) may
            # have been nearly used up on a loaded machine, the rounds left still finish.
            deadline = time.monotonic() + 30
            while client.exists(KeySpace().disk_rewrite_owed()):
                assert time.monotonic() < deadline, "a rewrite is still marked as owed"
                time.sleep(0.1)
    finally:
        server.stop()


def test_a_big_erase_reports_its_progress_batch_by_batch(redis_url, caplog):
    import redis

    pattern = KeySpace().conversations_of("acme", ERIN)
    assert pattern.endswith("*")
    with redis.Redis.from_url(redis_url) as r:
        r.mset({f"{pattern[:-1]}pad{i}:meta": "x" for i in range(1_200)})
    caplog.set_level("INFO", logger="gateway.memory")
    with running_gateway(memory_config(redis_url)) as url:
        response = httpx.delete(url + "/v1/memory", timeout=30, headers={
            "Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": ERIN})
    assert response.status_code == 200, response.text
    assert response.json()["keys_deleted"] == 1_200
    progress = [json.loads(r.getMessage()) for r in caplog.records
                if "erase_progress" in r.getMessage()]
    assert [(p["keys_done"], p["keys_total"]) for p in progress] == [
        (500, 1_200), (1_000, 1_200), (1_200, 1_200)]
    assert {p["tenant"] for p in progress} == {"acme"}
    with redis.Redis.from_url(redis_url) as r:
        assert not list(r.scan_iter(match=pattern))
