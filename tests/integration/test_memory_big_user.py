"""The memory API for a user holding over 100 MB: the export is streamed (chunked JSON, read a
page at a time, no store call near the store's timeout), the erase deletes it all, and a store
that does not answer in time is a 503 with Retry-After — never a 500.

The real app over HTTP, a real store (the session's Valkey); the big user is written straight
into the store (100 messages of a million characters, as a client sending its longest
messages would leave them), so the test does not spend minutes on chat requests.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest
import redis

from gateway.core.ids import ConversationKey
from gateway.core.messages import Message, chain
from gateway.store.codec import encode_stored
from gateway.store.keys import KeySpace
from tests.support.gateway import KEYS, gateway_config, running_gateway

USER = "big-user"
MESSAGES = 100
CHARS = 1_000_000
STORE_TIMEOUT = 1.0
"""Half the default: the export's calls must each stay well inside it."""
AUTH = {"Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": USER}


def _write_big_user(url: str) -> None:
    key = ConversationKey("acme", USER, "huge")
    ck = KeySpace().conversation(key)
    parent = None
    with redis.Redis.from_url(url) as client:
        for start in range(0, MESSAGES, 5):  # 5 MB at a time: the test's memory stays small
            messages = [Message.plain("user" if i % 2 == 0 else "assistant",
                                      f"m{i:03d} " + "x" * (CHARS - 5))
                        for i in range(start, start + 5)]
            stored = chain(parent, messages, created_at=1_700_000_000.0 + start)
            parent = stored[-1].id
            client.rpush(ck.transcript, *(encode_stored(m) for m in stored))
        client.hset(ck.meta, mapping={"tenant": "acme", "user": USER, "conversation": "huge",
                                      "created_at": 1_700_000_000.0,
                                      "updated_at": 1_700_000_100.0,
                                      "message_count": MESSAGES})
        client.rpush(KeySpace().conversation(ConversationKey("acme", USER, "small")).transcript,
                     *(encode_stored(m) for m in chain(None, [Message.plain("user", "hi")])))
        client.hset(KeySpace().conversation(ConversationKey("acme", USER, "small")).meta,
                    mapping={"message_count": 1})


@pytest.fixture
def big_user(redis_url):
    _write_big_user(redis_url)
    config = gateway_config(redis_url, server={"store_timeout_seconds": STORE_TIMEOUT})
    with running_gateway(config) as url:
        yield url


def test_a_user_of_over_100_mb_is_exported_as_a_stream_and_erased(big_user, redis_url):
    with redis.Redis.from_url(redis_url) as client:
        held = sum(client.memory_usage(n) or 0 for n in client.scan_iter(f"*{USER}*"))
    assert held >= 100_000_000

    pieces = 0
    body = bytearray()
    with httpx.stream("GET", big_user + "/v1/memory/export", headers=AUTH,
                      timeout=120) as response:
        assert response.status_code == 200
        assert response.headers["transfer-encoding"] == "chunked"  # written as it is read
        for piece in response.iter_bytes():
            pieces += 1
            body += piece
    document = json.loads(body)
    assert document["object"] == "memory.export" and document["user"] == USER
    huge = next(c for c in document["conversations"] if c["id"] == "huge")
    texts = [m["message"]["content"] for m in huge["messages"]]
    assert [t[:4] for t in texts] == [f"m{i:03d}" for i in range(MESSAGES)]  # all, in order
    assert all(len(t) == CHARS for t in texts)
    assert huge["pending"] == [] and huge["message_count"] == MESSAGES
    assert {c["id"] for c in document["conversations"]} == {"huge", "small"}
    assert pieces > 1

    one = httpx.get(big_user + "/v1/memory/conversations/huge", headers=AUTH, timeout=120)
    assert one.status_code == 200 and one.headers["transfer-encoding"] == "chunked"
    assert len(one.json()["messages"]) == MESSAGES
    for path in ("/v1/memory/facts", "/v1/memory/conversations/huge/chunks",
                 "/v1/memory/conversations"):  # sources looked up a page at a time
        assert httpx.get(big_user + path, headers=AUTH, timeout=120).status_code == 200, path
    last = huge["messages"][-1]["id"]
    pinned = _answered("PUT", big_user + f"/v1/memory/conversations/huge/pins/{last}")
    assert pinned.status_code == 200, pinned.text
    gone = _answered("DELETE", big_user + "/v1/memory/conversations/huge")
    assert gone.status_code == 200, gone.text

    erased = _answered("DELETE", big_user + "/v1/memory")
    assert erased.status_code == 200, erased.text
    assert erased.json()["keys_deleted"] >= 2  # what the conversation delete left
    with redis.Redis.from_url(redis_url) as client:
        assert not [n for n in client.scan_iter(f"*{USER}*") if b":erased:" not in n]
    again = httpx.get(big_user + "/v1/memory/export", headers=AUTH, timeout=30).json()
    assert again["conversations"] == [] and again["facts"] == []


def _answered(method: str, url: str) -> httpx.Response:
    """The answer to a request repeated as the API asks after a 503 (`Retry-After`; the
    operation is safe to repeat), at most three times: the pin and the deletes read the 100 MB
    conversation a page (up to 16 MB) at a time, and on a loaded machine — the suite runs a
    worker per core — one page can outlast the 1 s timeout. Any other answer is returned."""
    for _ in range(3):
        response = httpx.request(method, url, headers=AUTH, timeout=120)
        if response.status_code != 503:
            return response
        assert response.headers["retry-after"] == "1"
        assert response.json()["error"]["code"] == "store_unavailable"
        time.sleep(1)
    return response


@pytest.mark.parametrize("method, path", [
    ("GET", "/v1/memory/export"), ("DELETE", "/v1/memory"), ("GET", "/v1/memory/facts"),
    ("GET", "/v1/memory/conversations"), ("DELETE", "/v1/memory/conversations/small"),
    ("PATCH", "/v1/memory/settings"),
])
def test_a_store_that_does_not_answer_in_time_is_a_503_with_retry_after(
        big_user, redis_url, method, path):
    # The store pauses every client (CLIENT PAUSE) for longer than the gateway's timeout:
    # real commands, really unanswered, and a pause that ends by itself.
    with redis.Redis.from_url(redis_url) as client:
        client.execute_command("CLIENT", "PAUSE", int(STORE_TIMEOUT * 3000), "ALL")
    response = httpx.request(method, big_user + path, headers=AUTH, timeout=30,
                             json={"memory": True} if method == "PATCH" else None)
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "1"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "store_unavailable"
    deadline = time.monotonic() + 30  # once the pause is over, the same request succeeds
    while (again := httpx.request(method, big_user + path, headers=AUTH, timeout=30,
                                  json={"memory": True} if method == "PATCH" else None)
           ).status_code == 503:
        assert time.monotonic() < deadline, again.text
        time.sleep(0.2)
    assert again.status_code in (200, 404), again.text


def test_lists_are_paged_by_cursor(redis_url):
    names = [f"c-{i:02d}" for i in range(7)]
    with redis.Redis.from_url(redis_url) as client:
        for name in names:
            client.hset(KeySpace().conversation(ConversationKey("acme", "pager", name)).meta,
                        mapping={"message_count": 1})
    headers = {**AUTH, "X-User-Id": "pager"}
    with running_gateway(gateway_config(redis_url)) as url:
        seen, after, pages = [], None, 0
        while True:
            params = {"limit": 3, **({"after": after} if after else {})}
            page = httpx.get(url + "/v1/memory/conversations", headers=headers, params=params,
                             timeout=30).json()
            pages += 1
            seen += [c["id"] for c in page["data"]]
            assert page["last_id"] == page["data"][-1]["id"]
            if not page["has_more"]:
                break
            after = page["last_id"]
        assert (seen, pages) == (names, 3)
        whole = httpx.get(url + "/v1/memory/conversations", headers=headers, timeout=30).json()
        assert [c["id"] for c in whole["data"]] == names and whole["has_more"] is False
        for bad in ("0", "1001", "x", "-1"):
            response = httpx.get(url + "/v1/memory/conversations", headers=headers,
                                 params={"limit": bad}, timeout=30)
            assert response.status_code == 400 and response.json()["error"]["param"] == "limit"
