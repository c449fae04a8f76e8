"""Encryption at rest, end to end: the real gateway over HTTP, a real store, inline recording
(the recorder and the memory worker — turn index, summaries, facts, profile, user recall index
— have run when a reply returns).

The proof that no text is stored in clear is store-wide: every key is read with SCAN (names
and values, every type) and the store's append-only file — which keeps what was written and
later deleted, such as applied record-stream entries — is searched byte for byte."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import redis

from gateway.http.app import create_app
from gateway.config import hash_key, parse_config
from gateway.core.ids import ConversationKey
from gateway.core.messages import Message
from gateway.core.transcript import TurnRecord
from gateway.errors import ConfigError
from gateway.pipeline.record_buffer import BufferedTurn
from gateway.pipeline.record_journal import decode_turn, encode_turn
from gateway.store import connect
from gateway.store.encryption.crypto import (
    DataKey,
    DecryptError,
    Encryption,
    TenantCipher,
    key_id,
    sealed_key_id,
)
from gateway.store.encryption.keyring import load_encryption
from gateway.store.keys import KeySpace
from gateway.store.redis_store import RedisStore
from tests.support.gateway import KEYS, MODELS, forwarded, running_gateway
from tests.integration.test_memory_erase import chat, converse, dump, mentions
from tests.integration.test_one_shot_http import append_only_files

KEY_A = base64.b64encode(bytes(range(32))).decode()
KEY_B = base64.b64encode(bytes(range(100, 132))).decode()
USER = "erin-7Q"
CANARY = {"acme": "Zephquor", "globex": "Vantrixel"}


@pytest.fixture(autouse=True)
def keys_in_env(monkeypatch):
    monkeypatch.setenv("GW_TEST_KEY_A", KEY_A)
    monkeypatch.setenv("GW_TEST_KEY_B", KEY_B)


def config(store: str, encryption: dict[str, Any] | None = None, *,
           tenant_encryption: dict[str, dict[str, Any]] | None = None, data_dir: str = ""):
    """Inline recording, compaction after two rounds beyond one recent turn (a handful of
    turns makes summary chunks), chunks recalled (off by default) and facts offered with each
    request: every layer must be read back through the encryption."""
    tenant = {"models": MODELS,
              "memory": {"compaction": {"min_rounds": 2, "recent_window_turns": 1},
                         "facts_k": 5, "recall_chunks": True},
              "context": {"max_context_tokens": 4000, "reserve_completion_tokens": 200}}
    top: dict[str, Any] = {"encryption": encryption} if encryption else {}
    if data_dir:
        top["server"] = {"data_dir": data_dir}
    return parse_config({
        "store": store, "recorder": {"mode": "inline"},
        "memory": {"embedder": {"kind": "hash"}}, **top,
        "tenants": {name: {**tenant, "api_keys": [{"sha256": hash_key(key)}],
                           **({"encryption": tenant_encryption[name]}
                              if tenant_encryption and name in tenant_encryption else {})}
                    for name, key in KEYS.items()}})


def populate(url: str, tenant: str) -> None:
    """Facts (one whose key holds the canary: `prefers_<thing>`), a profile, two conversations
    with summary chunks, and a fork (an archived branch)."""
    word = CANARY[tenant]
    history = converse(url, tenant, USER, "c-one", [
        f"My name is {word} Canary.", f"I live in {word}ville.", f"I love {word} pizza.",
        *(f"{word} note {i}: the {word} garden needs water on day {i}." for i in range(5))])
    chat(url, tenant, USER, "c-one", [*history[:4], {"role": "user",
                                                      "content": f"Edited {word} question."}])
    converse(url, tenant, USER, "c-two", [f"{word} second chat, turn {i}." for i in range(4)])
    # A pinned message (marker), and one the importance rule pins.
    chat(url, tenant, USER, "c-three", [{"role": "user", "x_gateway_pin": True,
                                         "content": f"Never mention {word} to anyone."}])
    chat(url, tenant, USER, "c-four", [{"role": "user",
                                        "content": f"Remember that my {word} code is ZQ-4417."}])


def in_clear(store_url: str, word: str) -> list[str]:
    """Where `word` occurs in clear (any case): key names, values, the append-only files."""
    found = [name for name, value in dump(store_url).items()
             if mentions(name, word) or mentions(value, word)]
    for path in append_only_files(store_url):
        if word.lower().encode() in path.read_bytes().lower():
            found.append(str(path))
    return found


def sdk(url: str, conversation: str, tenant: str = "acme") -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=KEYS[tenant], max_retries=0,
                         default_headers={"X-Conversation-Id": conversation, "X-User-Id": USER})


def recalled(url: str, tenant: str, question: str) -> str:
    """What the upstream received (besides the question) in a new conversation of the user."""
    reply = sdk(url, "c-new", tenant).chat.completions.create(
        model="messages", messages=[{"role": "user", "content": question}])
    received = forwarded(reply.choices[0].message.content or "")
    return json.dumps(received[:-1], ensure_ascii=False)


def sealed_values(store_url: str, tenant: str) -> dict[str, list[str]]:
    """The stored texts of a tenant's text-holding keys, by key."""
    from gateway.store.encryption.rotation import SEALED_HASHES, SEALED_LISTS, kind_of

    out: dict[str, list[str]] = {}
    with redis.Redis.from_url(store_url, decode_responses=True) as r:
        for scope in ("c", "u"):
            for name in r.scan_iter(match=f"gw:{scope}:{len(tenant)}:{tenant}:*"):
                kind = kind_of(name, "gw", scope)
                if kind in SEALED_LISTS:
                    out[name] = r.lrange(name, 0, -1)
                elif kind in SEALED_HASHES:
                    out[name] = list(r.hgetall(name).values())
    return out


def test_no_stored_text_is_in_clear_and_memory_still_works(redis_url):
    with running_gateway(config(redis_url, {"key_env": "GW_TEST_KEY_A"})) as url:
        for tenant in CANARY:
            populate(url, tenant)
        # Everything memory keeps exists, and reads back through the gateway in clear.
        export = httpx.get(url + "/v1/memory/export", timeout=30, headers={
            "Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": USER}).json()
        assert mentions(export["facts"], "Zephquor Canary")
        assert any(f["key"] == "prefers_zephquor_pizza" for f in export["facts"])
        assert any(c["chunks"] for c in export["conversations"])
        assert any(c["branches"] for c in export["conversations"])
        # Recall opens what it finds: turns and facts of earlier conversations reach the model.
        seen = recalled(url, "acme", "Where do I live, and what is my name?")
        assert "I live in Zephquorville" in seen and "User: My name is Zephquor" in seen  # turn, chunk
        assert "Vantrixel" not in seen
        # A fact is found by its key, though its field in the store is a keyed name.
        deleted = httpx.delete(url + "/v1/memory/facts/prefers_zephquor_pizza", timeout=30,
                               headers={"Authorization": f"Bearer {KEYS['acme']}",
                                        "X-User-Id": USER})
        assert deleted.status_code == 200, deleted.text
        facts = httpx.get(url + "/v1/memory/facts", timeout=30, headers={
            "Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": USER}).json()["data"]
        assert "prefers_zephquor_pizza" not in {f["key"] for f in facts} and facts

        for word in CANARY.values():
            assert in_clear(redis_url, word) == []
        texts = sealed_values(redis_url, "acme")
        kinds = {name.rsplit(":", 1)[-1] for name in texts}
        assert {"transcript", "branches", "turns", "chunks", "facts", "profile",
                "recall", "pins"} <= kinds  # "pins": the m:pins hash
        assert all(sealed_key_id(t) == key_id(base64.b64decode(KEY_A))
                   for values in texts.values() for t in values)


def test_a_ciphertext_moved_to_another_tenant_does_not_open(redis_url):
    """Both tenants share one key; the tenant is bound into every ciphertext."""
    with running_gateway(config(redis_url, {"key_env": "GW_TEST_KEY_A"})) as url:
        converse(url, "acme", USER, "c-one", ["My name is Zephquor Canary."])
        converse(url, "globex", USER, "c-one", ["My name is Vantrixel Canary."])
        ks = KeySpace()
        acme = ks.conversation(ConversationKey("acme", USER, "c-one")).transcript
        globex = ks.conversation(ConversationKey("globex", USER, "c-one")).transcript
        with redis.Redis.from_url(redis_url, decode_responses=True) as r:
            r.lset(globex, 0, r.lindex(acme, 0))
        # The gateway that wrote it holds what it decoded before the move: globex's own.
        warm = sdk(url, "c-one", "globex").chat.completions.create(
            model="messages", messages=[{"role": "user", "content": "What is my name?"}])
        said = warm.choices[0].message.content or ""
        assert "Vantrixel" in said and "Zephquor" not in said

    async def load() -> None:
        client = connect(redis_url)
        try:
            store = RedisStore(client, encryption=await load_encryption(
                config(redis_url, {"key_env": "GW_TEST_KEY_A"}), client))
            with pytest.raises(DecryptError, match="tenant globex"):
                await store.load(ConversationKey("globex", USER, "c-one"))
        finally:
            await client.aclose()
    asyncio.run(load())

    # Through a gateway that has not read it yet (a process's decoded transcripts are checked
    # by their length and last element, which the move left alone): the request still goes
    # through (fail open), and the other tenant's text never reaches the model.
    with running_gateway(config(redis_url, {"key_env": "GW_TEST_KEY_A"})) as url:
        raw = sdk(url, "c-one", "globex").chat.completions.with_raw_response.create(
            model="messages", messages=[{"role": "user", "content": "What is my name?"}])
        assert raw.headers["x-gateway-passthrough"] == "store_unavailable"
        assert forwarded(raw.parse().choices[0].message.content or "") == [
            {"role": "user", "content": "What is my name?"}]


def test_a_retried_enqueue_is_not_enqueued_twice_though_each_seal_differs(redis_url):
    """The store dedupes a retried record by a keyed digest of its plaintext (a payload sealed
    twice differs: a fresh nonce each time)."""
    async def run() -> tuple[str, str, int, str]:
        client = connect(redis_url)
        try:
            cfg = config(redis_url, {"key_env": "GW_TEST_KEY_A"})
            store = RedisStore(client, encryption=await load_encryption(cfg, client))
            key = ConversationKey("acme", USER, "c-retry")
            record = TurnRecord(mode="append", parent_id=None,
                                messages=(Message("user", "Zephquor, once"),), created_at=1e9,
                                request_id="r1")
            first, again = await store.record(key, record), await store.record(key, record)
            last = await client.get(KeySpace().conversation(key).last_enqueued)
            return first, again, await store.pending_count(key), last
        finally:
            await client.aclose()
    first, again, pending, last = asyncio.run(run())
    assert first == again and pending == 1
    assert "Zephquor" not in last


async def start(cfg: Any) -> None:
    """The app's start-up (its lifespan), as uvicorn runs it, and its shutdown."""
    app = create_app(cfg)
    async with app.router.lifespan_context(app):
        pass


def test_a_wrong_key_fails_the_start_naming_the_key(redis_url):
    with running_gateway(config(redis_url, {"key_env": "GW_TEST_KEY_A"})) as url:
        converse(url, "acme", USER, "c-one", ["My name is Zephquor Canary."])
    wrong = config(redis_url, {"key_env": "GW_TEST_KEY_B"})
    with pytest.raises(ConfigError, match="^encryption.key_env: the key in GW_TEST_KEY_B does "
                                          "not open tenant acme's data in the store"):
        asyncio.run(start(wrong))
    asyncio.run(start(config(redis_url, {"key_env": "GW_TEST_KEY_A"})))  # the right one does


def test_a_tenant_key_of_its_own_is_named_by_its_dotted_key(redis_url):
    per_tenant = config(redis_url, {"key_env": "GW_TEST_KEY_A"},
                        tenant_encryption={"globex": {"key_env": "GW_TEST_KEY_B"}})
    with running_gateway(per_tenant) as url:  # globex gets its record under key B now
        converse(url, "globex", USER, "c-one", ["hello"])
    swapped = config(redis_url, {"key_env": "GW_TEST_KEY_B"},
                     tenant_encryption={"globex": {"key_env": "GW_TEST_KEY_A"}})
    with pytest.raises(ConfigError, match=r"^encryption.key_env"):
        asyncio.run(_check(redis_url, swapped))
    only_acme = config(redis_url, tenant_encryption={"acme": {"key_env": "GW_TEST_KEY_A"}})
    with pytest.raises(ConfigError, match="tenants.globex.encryption: the store holds this "
                                          "tenant's texts encrypted"):
        asyncio.run(_check(redis_url, only_acme))


async def _check(store_url: str, cfg: Any) -> None:
    client = connect(store_url)
    try:
        await load_encryption(cfg, client)
    finally:
        await client.aclose()


def test_a_missing_or_malformed_key_is_a_config_error_naming_it(redis_url, monkeypatch):
    monkeypatch.delenv("GW_TEST_KEY_B")
    with pytest.raises(ConfigError, match="encryption.key_env: environment variable "
                                          "GW_TEST_KEY_B is not set"):
        config(redis_url, {"key_env": "GW_TEST_KEY_B"})
    with pytest.raises(ConfigError, match="tenants.acme.encryption.previous_key_env: "
                                          "environment variable GW_TEST_KEY_B is not set"):
        config(redis_url, tenant_encryption={"acme": {"key_env": "GW_TEST_KEY_A",
                                                      "previous_key_env": "GW_TEST_KEY_B"}})
    monkeypatch.setenv("GW_TEST_KEY_B", base64.b64encode(b"too short").decode())
    with pytest.raises(ConfigError, match="GW_TEST_KEY_B is not a 256-bit key"):
        config(redis_url, {"key_env": "GW_TEST_KEY_B"})


def test_gateway_serve_exits_at_start_naming_a_wrong_key(redis_url, tmp_path):
    with running_gateway(config(redis_url, {"key_env": "GW_TEST_KEY_A"})) as url:
        converse(url, "acme", USER, "c-one", ["hello"])
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps({
        "store": redis_url, "encryption": {"key_env": "GW_TEST_KEY_B"},
        "server": {"data_dir": str(tmp_path)},
        "tenants": {"acme": {"api_keys": [{"sha256": hash_key("k")}], "models": MODELS}}}))
    done = subprocess.run([sys.executable, "-m", "gateway", "serve", "--config", str(path),
                           "--port", "1"], check=False, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path.cwd())})
    assert done.returncode != 0
    # Said in the configured log format (JSON lines on stdout by default).
    assert "encryption.key_env: the key in GW_TEST_KEY_B does not open tenant acme" \
        in done.stdout + done.stderr


def rotate(path: Path, tenant: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "gateway", "rotate-key", "--config",
                           str(path), "--tenant", tenant], check=False, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(Path.cwd())})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def write_config(path: Path, store: str, encryption: dict[str, Any] | None) -> Path:
    tenants = {name: {"api_keys": [{"sha256": hash_key(key)}], "models": MODELS,
                      "memory": {"compaction": {"min_rounds": 2, "recent_window_turns": 1}}}
               for name, key in KEYS.items()}
    path.write_text(json.dumps({"store": store, "recorder": {"mode": "inline"},
                                "memory": {"embedder": {"kind": "hash"}},
                                "server": {"data_dir": str(path.parent)},
                                **({"encryption": encryption} if encryption else {}),
                                "tenants": tenants}))
    return path


def test_switching_encryption_on_then_rotating_the_key(redis_url, tmp_path):
    """A store written in clear is read once a key is configured; `rotate-key` seals it; a
    second rotation moves it to a new key while the gateway keeps serving; afterwards the old
    key alone no longer starts the gateway, the new one alone reads everything."""
    key_a, key_b = key_id(base64.b64decode(KEY_A)), key_id(base64.b64decode(KEY_B))
    with running_gateway(config(redis_url)) as url:
        populate(url, "acme")
    clear = in_clear(redis_url, "Zephquor")  # off: stored as before, in clear
    assert any(path.startswith("/") for path in clear)  # its append-only file too

    with running_gateway(config(redis_url, {"key_env": "GW_TEST_KEY_A"})) as url:
        assert "I live in Zephquorville" in recalled(url, "acme", "Where do I live?")
        report = rotate(write_config(tmp_path / "a.yaml", redis_url,
                                     {"key_env": "GW_TEST_KEY_A"}), "acme")
        assert report["resealed"] > 20 and report["remaining"] == 0
        assert report["disk"] == "rewritten"
        assert rotate(tmp_path / "a.yaml", "acme")["resealed"] == 0  # resumable: nothing left
        # Once the store has rewritten its append-only file, no clear text is left on disk.
        rewritten(redis_url, lambda: not in_clear(redis_url, "Zephquor"))

    during = config(redis_url, {"key_env": "GW_TEST_KEY_B", "previous_key_env": "GW_TEST_KEY_A"})
    with running_gateway(during) as url:
        converse(url, "acme", USER, "c-three", ["A Zephquor turn written under key B."])
        stored = {sealed_key_id(t) for v in sealed_values(redis_url, "acme").values() for t in v}
        assert stored == {key_a, key_b}
        report = rotate(write_config(tmp_path / "b.yaml", redis_url,
                                     {"key_env": "GW_TEST_KEY_B",
                                      "previous_key_env": "GW_TEST_KEY_A"}), "acme")
        assert report["remaining"] == 0 and report["record_resealed"] is True
        assert report["queued_under_old_keys"] == 0
        stored = {sealed_key_id(t) for v in sealed_values(redis_url, "acme").values() for t in v}
        assert stored == {key_b}
        # The top-level key is globex's too: its key record (it stored nothing) moves with it.
        assert rotate(tmp_path / "b.yaml", "globex")["record_resealed"] is True

    with pytest.raises(ConfigError, match="GW_TEST_KEY_A does not open tenant acme"):
        asyncio.run(_check(redis_url, config(redis_url, {"key_env": "GW_TEST_KEY_A"})))
    with running_gateway(config(redis_url, {"key_env": "GW_TEST_KEY_B"})) as url:
        assert "I live in Zephquorville" in recalled(url, "acme", "Where do I live?")
        export = httpx.get(url + "/v1/memory/export", timeout=30, headers={
            "Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": USER}).json()
        assert mentions(export["facts"], "Zephquor Canary")
        assert len(export["conversations"]) >= 3


def test_rotation_reseals_the_responses_apis_stored_responses(redis_url, tmp_path):
    """Stored responses and their owner lookups move to the new key with everything else:
    with only the new key, a response is still read and its chain continued."""
    headers = {"Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": USER}
    with running_gateway(config(redis_url, {"key_env": "GW_TEST_KEY_A"})) as url:
        first = httpx.post(url + "/v1/responses", timeout=30, headers=headers,
                           json={"model": "echo", "input": "Zephquor in a response"}).json()
    keys = KeySpace()
    with redis.Redis.from_url(redis_url, decode_responses=True) as r:
        owner = keys.response_owner("acme", first["id"])
        (chain,) = r.scan_iter(match="gw:c:4:acme:*:responses")
        stored = {field: text for field, text in r.hgetall(chain).items()}
        assert stored["latest"] == first["id"]  # an id, never sealed
        before = {r.get(owner), stored[first["id"]]}
        assert {sealed_key_id(t) for t in before} == {key_id(base64.b64decode(KEY_A))}
        ttl = r.ttl(owner)

    report = rotate(write_config(tmp_path / "b.yaml", redis_url,
                                 {"key_env": "GW_TEST_KEY_B",
                                  "previous_key_env": "GW_TEST_KEY_A"}), "acme")
    assert report["remaining"] == 0 and report["resealed"] >= 2
    assert rotate(tmp_path / "b.yaml", "globex")["record_resealed"] is True  # its key record
    with redis.Redis.from_url(redis_url, decode_responses=True) as r:
        after = {r.get(owner), r.hget(chain, first["id"])}
        assert {sealed_key_id(t) for t in after} == {key_id(base64.b64decode(KEY_B))}
        assert r.hget(chain, "latest") == first["id"]
        assert 0 < r.ttl(owner) <= ttl  # its expiry kept

    with running_gateway(config(redis_url, {"key_env": "GW_TEST_KEY_B"})) as url:
        read = httpx.get(url + f"/v1/responses/{first['id']}", timeout=30, headers=headers)
        assert read.status_code == 200 and read.json()["id"] == first["id"]
        assert "Zephquor in a response" in json.dumps(read.json())
        then = httpx.post(url + "/v1/responses", timeout=30, headers=headers, json={
            "model": "echo", "input": "and then?", "previous_response_id": first["id"]})
        assert then.status_code == 200, then.text


def rewritten(store_url: str, done: Any, timeout: float = 30.0) -> None:
    """Wait until the store has no append-only file rewrite scheduled or running and
    `done()` holds (the old files are deleted in the background after a rewrite)."""
    deadline = time.monotonic() + timeout
    with redis.Redis.from_url(store_url, decode_responses=True) as r:
        while True:
            info = r.info("persistence")
            if not int(info["aof_rewrite_in_progress"]) and \
                    not int(info["aof_rewrite_scheduled"]) and done():
                return
            assert time.monotonic() < deadline, f"still on disk: {in_clear(store_url, 'Zephquor')}"
            time.sleep(0.1)


def test_record_journal_lines_are_sealed_per_tenant():
    cipher = TenantCipher("acme", DataKey(base64.b64decode(KEY_A)))
    encryption = Encryption({"acme": cipher})
    record = TurnRecord(mode="append", parent_id=None,
                        messages=(Message("user", "Zephquor in a journal"),), created_at=1.0,
                        request_id="r1")
    turn = BufferedTurn(key=ConversationKey("acme", USER, "c"), request_id="r1", record=record,
                        created_at=1.0)
    line = encode_turn(turn, encryption)
    assert "Zephquor" not in line and json.loads(line)["tenant"] == "acme"
    assert decode_turn(line, encryption) == turn
    with pytest.raises(DecryptError):
        decode_turn(line)  # no key for the tenant: never read as garbage
    other = BufferedTurn(key=ConversationKey("globex", USER, "c"), request_id="r2",
                         record=record, created_at=1.0)
    assert "Zephquor" in encode_turn(other, encryption)  # a tenant without a key: as before


def test_sealed_texts_differ_each_time_and_open_only_for_their_tenant():
    key = DataKey(base64.b64decode(KEY_A))
    acme, globex = TenantCipher("acme", key), TenantCipher("globex", key)
    one, two = acme.seal("same text"), acme.seal("same text")
    assert one != two and acme.open(one) == acme.open(two) == "same text"
    with pytest.raises(DecryptError, match="tenant globex"):
        globex.open(one)
    tampered = one[:-4] + ("AAAA" if not one.endswith("AAAA") else "BBBB")
    with pytest.raises(DecryptError):
        acme.open(tampered)
    assert acme.open('{"plain": "json"}') == '{"plain": "json"}'  # written before the key


def test_a_fact_edited_in_the_console_is_sealed_too(redis_url):
    from tests.support.console import ADMIN_KEY, csrf_of, signed_in

    data = config(redis_url, {"key_env": "GW_TEST_KEY_A"}).model_dump(mode="json",
                                                                      exclude_defaults=True)
    data["admin"] = {"keys": [{"sha256": hash_key(ADMIN_KEY)}]}
    data["console"] = {"enabled": True, "secure_cookie": False}
    with running_gateway(parse_config(data)) as url:
        converse(url, "acme", USER, "c-one", ["I live in Paris."])
        client = signed_in(url)
        page = f"/console/t/acme/u/{USER}"
        response = client.post(page + "/facts/edit", data={
            "csrf": csrf_of(client.get(page).text), "key": "user_location",
            "value": "Quorblefield"})
        assert response.status_code == 303, response.text
        facts = httpx.get(url + "/v1/memory/facts", timeout=30, headers={
            "Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": USER}).json()["data"]
        assert {f["key"]: f["value"] for f in facts}["user_location"] == "Quorblefield"
        assert in_clear(redis_url, "Quorblefield") == []
