"""Importing a history (`POST /v1/memory/conversations/{id}/import`) over HTTP against the real
app and a real store: the import stores and derives what a live client's turns at the same
times do; it is idempotent; it is refused for an erase it predates, for bad input (4xx in the
API's error shape) and for another tenant's key."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
import redis

from gateway.core.ids import ConversationKey
from gateway.memory.records.keys import MemoryKeySpace
from tests.integration.test_memory_erase import BOB, ERIN, converse, memory_config
from tests.support.gateway import KEYS, running_gateway

TEXTS = ["My name is Odalys Fennimore and I keep bees in Tromsø.",
         "The hives are painted teal; the oldest colony is called Marigold.",
         "Last spring Marigold swarmed twice, on May 3 and May 19.",
         "I sell the honey at the Saturday market for 14 euros a jar.",
         "My phone is +47 912 34 567 if the market organiser asks.",
         "Next year I want to add a fourth hive near the fjord."]


def api(url: str, method: str, path: str, *, tenant: str = "acme", user: str | None = ERIN,
        headers: dict[str, str] | None = None, **kwargs: Any) -> httpx.Response:
    sent = {"Authorization": f"Bearer {KEYS[tenant]}", **(headers or {})}
    if user is not None:
        sent["X-User-Id"] = user
    return httpx.request(method, url + "/v1/memory" + path, headers=sent, timeout=60, **kwargs)


def imported(url: str, conversation: str, messages: list[dict[str, Any]],
             **kwargs: Any) -> dict[str, Any]:
    response = api(url, "POST", f"/conversations/{conversation}/import",
                   json={"messages": messages}, **kwargs)
    assert response.status_code == 200, response.text
    return response.json()


def stored(url: str, conversation: str, user: str = ERIN) -> dict[str, Any]:
    response = api(url, "GET", f"/conversations/{conversation}", user=user)
    assert response.status_code == 200, response.text
    return response.json()


def as_import(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stored messages of a conversation (GET) as an import body's messages."""
    return [{**m["message"], "created_at": m["created_at"]} for m in messages]


def error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()["error"]
    assert set(body) == {"message", "type", "param", "code"}
    return body


def turn_index(redis_url: str, user: str, conversation: str) -> dict[str, Any]:
    key = MemoryKeySpace().conversation(ConversationKey("acme", user, conversation))
    with redis.Redis.from_url(redis_url, decode_responses=True) as r:
        return {i: json.loads(v) for i, v in r.hgetall(key.turns).items()}


def chunks(document: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What a summary chunk says and covers (not when it was made)."""
    return [(c["text"], c["first_position"], c["last_position"], c["start_date"],
             c["end_date"], c["method"], tuple(c["source_ids"])) for c in document["chunks"]]


@pytest.fixture
def url(redis_url):
    with running_gateway(memory_config(redis_url)) as base:
        yield base


def test_an_imported_history_stores_and_derives_what_the_live_turns_did(url, redis_url):
    converse(url, "acme", ERIN, "c1", TEXTS)
    live = stored(url, "c1")
    assert live["chunks"], "the live turns made summary chunks (the comparison needs some)"

    result = imported(url, "c1", as_import(live["messages"]), user=BOB)

    assert result == {"object": "memory.conversation.import", "conversation": "c1",
                      "received": 12, "already_stored": 0, "added": 12, "records": 6,
                      "applied": True}
    copy = stored(url, "c1", user=BOB)
    # The same hash chain, times and stored form, message for message.
    assert copy["messages"] == live["messages"]
    assert chunks(copy) == chunks(live)
    assert turn_index(redis_url, BOB, "c1") == turn_index(redis_url, ERIN, "c1")
    assert "912 34 567" not in json.dumps(turn_index(redis_url, BOB, "c1"))  # redacted
    facts = {u: {f["key"]: f["value"] for f in api(url, "GET", "/facts", user=u).json()["data"]}
             for u in (ERIN, BOB)}
    assert facts[BOB] == facts[ERIN]


def test_importing_the_same_messages_again_adds_nothing_and_a_longer_history_adds_the_rest(
        url):
    messages = [{"role": "user" if n % 2 == 0 else "assistant", "content": text,
                 "created_at": 1_700_000_000 + 60 * n} for n, text in enumerate(TEXTS)]
    first = imported(url, "c2", messages[:4])
    assert (first["added"], first["already_stored"], first["records"]) == (4, 0, 4)
    before = stored(url, "c2")

    again = imported(url, "c2", messages[:4])
    assert (again["added"], again["already_stored"], again["records"]) == (0, 4, 0)
    assert stored(url, "c2") == before

    # ISO 8601 times mean the same instants as epoch seconds.
    longer = [{**m, "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                time.gmtime(m["created_at"]))}
              for m in messages]
    more = imported(url, "c2", longer)
    assert (more["added"], more["already_stored"]) == (2, 4)
    after = stored(url, "c2")["messages"]
    assert after[:4] == before["messages"]
    assert [m["created_at"] for m in after] == [m["created_at"] for m in messages]
    assert [m["message"]["content"] for m in after] == TEXTS


def test_a_stored_conversation_that_differs_is_a_409_and_left_as_it_was(url):
    converse(url, "acme", ERIN, "c3", TEXTS[:2])
    before = stored(url, "c3")
    other = as_import(before["messages"])
    other[2] = {**other[2], "content": "Something else entirely."}
    problem = error(api(url, "POST", "/conversations/c3/import", json={"messages": other}), 409)
    assert (problem["code"], problem["param"]) == ("conversation_differs", "messages[2]")
    assert stored(url, "c3") == before


def test_an_import_dated_before_an_erase_is_refused_and_one_after_it_is_kept(url):
    converse(url, "acme", ERIN, "c4", TEXTS[:2])
    assert api(url, "DELETE", "").status_code == 200
    old = [{"role": "user", "content": "Canary Wexley from last year.",
            "created_at": "2020-01-01T10:00:00Z"}]
    problem = error(api(url, "POST", "/conversations/c4/import", json={"messages": old}), 409)
    assert problem["code"] == "erased_after_messages"
    assert api(url, "GET", "/conversations/c4").status_code == 404
    assert "Wexley" not in api(url, "GET", "/export").text

    later = [{"role": "user", "content": "Written after the erase.",
              "created_at": time.time() + 5},
             {"role": "assistant", "content": "Noted.", "created_at": time.time() + 6}]
    assert imported(url, "c4", later)["added"] == 2
    assert [m["message"]["content"] for m in stored(url, "c4")["messages"]] == [
        "Written after the erase.", "Noted."]


GOOD = {"role": "user", "content": "hi", "created_at": 1_700_000_000}


@pytest.mark.parametrize("body, param", [
    ({}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [GOOD], "mode": "append"}, "mode"),
    ({"messages": [GOOD, "hi"]}, "messages[1]"),
    ({"messages": [{**GOOD, "role": "system"}]}, "messages[0].role"),
    ({"messages": [{**GOOD, "role": "tool"}]}, "messages[0].role"),
    ({"messages": [{**GOOD, "content": None}]}, "messages[0].content"),
    ({"messages": [{**GOOD, "content": [{"type": "image_url", "image_url": "x"}]}]},
     "messages[0].content"),
    ({"messages": [{"role": "user", "content": "hi"}]}, "messages[0].created_at"),
    ({"messages": [{**GOOD, "created_at": "yesterday"}]}, "messages[0].created_at"),
    ({"messages": [{**GOOD, "created_at": 1_700_000_000_000}]}, "messages[0].created_at"),
    ({"messages": [{**GOOD, "created_at": -1}]}, "messages[0].created_at"),
    ({"messages": [{**GOOD, "created_at": 10 ** 400}]}, "messages[0].created_at"),
    ({"messages": [{**GOOD, "created_at": "0001-01-01T00:00:00"}]}, "messages[0].created_at"),
    ({"messages": [{**GOOD, "created_at": True}]}, "messages[0].created_at"),
    ({"messages": [{**GOOD, "tool_calls": []}]}, "messages[0].tool_calls"),
])
def test_bad_imports_are_a_400_naming_the_field_and_store_nothing(url, body, param):
    problem = error(api(url, "POST", "/conversations/c5/import", json=body), 400)
    assert (problem["type"], problem["param"]) == ("invalid_request_error", param)
    assert api(url, "GET", "/conversations/c5").status_code == 404


def test_unreadable_oversized_or_unowned_imports_are_4xx(url):
    path = "/conversations/c6/import"
    assert error(api(url, "POST", path, content=b"{not json"), 400)["code"] == "invalid_json"
    assert error(api(url, "POST", path, content=b"[]"), 400)["code"] == "invalid_json"
    huge = b'{"messages": [' + b" " * (16 * 1024 * 1024) + b"]}"
    assert error(api(url, "POST", path, content=huge), 413)["code"] == "payload_too_large"
    assert error(api(url, "POST", path, json={"messages": [GOOD]}, user=None),
                 400)["code"] == "invalid_user_id"
    bad_id = "/conversations/" + "x" * 200 + "/import"
    assert error(api(url, "POST", bad_id, json={"messages": [GOOD]}), 400)["param"] == \
        "conversation_id"
    assert api(url, "GET", "/conversations/c6").status_code == 404


def test_another_tenants_key_cannot_import_into_this_tenant(url):
    wrong = api(url, "POST", "/conversations/c7/import", json={"messages": [GOOD]},
                tenant="globex", headers={"X-Gateway-Tenant": "acme"})
    assert error(wrong, 403)["code"] == "insufficient_permissions"
    bad_key = httpx.post(url + "/v1/memory/conversations/c7/import", timeout=30,
                         json={"messages": [GOOD]},
                         headers={"Authorization": "Bearer nope", "X-User-Id": ERIN})
    assert error(bad_key, 401)["code"] == "invalid_api_key"
    # globex's key imports into globex's own user of that name, never into acme's.
    assert imported(url, "c7", [GOOD], tenant="globex")["added"] == 1
    assert api(url, "GET", "/conversations/c7").status_code == 404
    assert api(url, "GET", "/conversations/c7", tenant="globex").status_code == 200


def off_loop_parses(url: str) -> float:
    """How many import bodies were parsed off the serving loop (`/metrics`)."""
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        if line.startswith('gateway_off_loop_steps_total{step="import_parse"}'):
            return float(line.split()[-1])
    return 0.0


def test_a_large_import_is_parsed_off_the_serving_loop_and_a_small_one_inline(url):
    small = [{**GOOD, "content": "short"}]
    assert imported(url, "c8", small)["added"] == 1
    assert off_loop_parses(url) == 0
    large = small + [{"role": "user" if n % 2 else "assistant", "content": f"{n} " + "x" * 1000,
                      "created_at": 1_700_000_001 + n} for n in range(300)]
    result = imported(url, "c8", large)
    assert (result["already_stored"], result["added"]) == (1, 300)
    assert off_loop_parses(url) == 1
