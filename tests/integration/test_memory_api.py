"""The user-control API over HTTP, against the real app and store: switches, facts and chunks
with their sources, conversations, export, deletes — always one user of one tenant."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.support.gateway import KEYS, forwarded, running_gateway
from tests.integration.test_memory_erase import BOB, ERIN, chat, converse, memory_config, populate


class Api:
    """httpx calls as one user of one tenant."""

    def __init__(self, url: str, tenant: str = "acme", user: str | None = ERIN,
                 header: str = "X-User-Id"):
        self.url = url
        self.headers = {"Authorization": f"Bearer {KEYS[tenant]}"}
        if user is not None:
            self.headers[header] = user

    def __call__(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.request(method, self.url + "/v1/memory" + path, headers=self.headers,
                             timeout=30, **kwargs)

    def ok(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self(method, path, **kwargs)
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture
def url(redis_url):
    config = memory_config(redis_url, headers={"globex": {"user_id": "X-End-User"}})
    with running_gateway(config) as base:
        yield base


@pytest.fixture
def erin(url):
    populate(url, "acme", ERIN)
    return Api(url)


def error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()["error"]
    assert set(body) == {"message", "type", "param", "code"}
    return body


def test_settings_default_on_and_change_per_user(url):
    erin, bob = Api(url), Api(url, user=BOB)
    assert erin.ok("GET", "/settings") == {"object": "memory.settings", "memory": True,
                                           "auto_extract": True, "tenant_memory": True}
    changed = erin.ok("PATCH", "/settings", json={"auto_extract": False})
    assert (changed["memory"], changed["auto_extract"]) == (True, False)
    assert erin.ok("GET", "/settings")["auto_extract"] is False
    assert bob.ok("GET", "/settings")["auto_extract"] is True


@pytest.mark.parametrize("body, param", [
    ({"memory": "off"}, "memory"), ({"auto_extract": 1}, "auto_extract"),
    ({"memroy": True}, "memroy"), ([True], None), ("not json", None)])
def test_bad_settings_are_a_400_naming_the_field(url, body, param):
    api = Api(url)
    kwargs = {"content": body} if isinstance(body, str) else {"json": body}
    problem = error(api("PATCH", "/settings", **kwargs), 400)
    assert (problem["type"], problem["param"]) == ("invalid_request_error", param)


def test_auto_extract_off_learns_no_facts_and_memory_off_makes_no_chunks(url):
    api = Api(url)
    api.ok("PATCH", "/settings", json={"auto_extract": False})
    converse(url, "acme", ERIN, "c1", ["My name is Zorblax Canary."])
    assert api.ok("GET", "/facts")["data"] == []
    api.ok("PATCH", "/settings", json={"memory": False})
    converse(url, "acme", ERIN, "c2", [f"Zorblax turn {i}." for i in range(6)])
    assert api.ok("GET", "/conversations/c2/chunks")["data"] == []


def test_facts_come_with_the_messages_they_were_learned_from(erin):
    facts = {f["key"]: f for f in erin.ok("GET", "/facts")["data"]}
    name = facts["user_name"]
    assert name["value"] == "Zorblax Canary"
    assert {"type", "importance", "confidence", "created_at", "updated_at", "history",
            "source_ids"} <= set(name)
    (source,) = name["sources"]
    assert source == {"conversation": "c-one", "id": name["source_ids"][0], "role": "user",
                      "content": "My name is Zorblax Canary."}


def test_deleting_a_fact_forgets_it_and_a_second_delete_is_a_404(erin):
    assert erin.ok("DELETE", "/facts/user_name")["deleted"] is True
    assert "user_name" not in {f["key"] for f in erin.ok("GET", "/facts")["data"]}
    assert error(erin("DELETE", "/facts/user_name"), 404)["code"] == "not_found"


def test_profile_is_shown_and_deleted(erin):
    assert erin.ok("GET", "/profile")["language"] == "en"
    erin.ok("DELETE", "/profile")
    assert erin.ok("GET", "/profile")["language"] is None


def test_conversations_are_listed_with_their_transcripts_and_branches(erin):
    listed = {c["id"]: c for c in erin.ok("GET", "/conversations")["data"]}
    assert set(listed) == {"c-one", "c-two"}
    assert listed["c-two"]["message_count"] == 8
    assert listed["c-one"]["created_at"] <= listed["c-one"]["updated_at"]
    one = erin.ok("GET", "/conversations/c-one")
    assert one["messages"][-2]["message"] == {"role": "user",
                                              "content": "Edited Zorblax question."}
    (branch,) = one["branches"]
    assert branch["messages"][0]["message"]["content"].startswith("Zorblax note 0")


def test_summary_chunks_come_with_their_sources_and_can_be_deleted(erin):
    chunks = erin.ok("GET", "/conversations/c-two/chunks")["data"]
    assert chunks and all(c["text"] and not c["deleted"] for c in chunks)
    first = chunks[0]
    assert [s["id"] for s in first["sources"]] == first["source_ids"]
    assert first["sources"][0]["content"] == "Zorblax second chat, turn 0."
    erin.ok("DELETE", f"/conversations/c-two/chunks/{first['id']}")
    after = erin.ok("GET", "/conversations/c-two/chunks")["data"][0]
    assert (after["id"], after["text"], after["deleted"]) == (first["id"], "", True)
    assert error(erin("DELETE", "/conversations/c-two/chunks/nope"), 404)["param"] == "chunk_id"


def test_deleting_a_conversation_removes_it_and_its_memory_only(erin, redis_url):
    erin.ok("DELETE", "/conversations/c-two")
    assert [c["id"] for c in erin.ok("GET", "/conversations")["data"]] == ["c-one"]
    for path in ("/conversations/c-two", "/conversations/c-two/chunks"):
        assert error(erin("GET", path), 404)["param"] == "conversation_id"
    assert error(erin("DELETE", "/conversations/c-two"), 404)["code"] == "not_found"
    assert erin.ok("GET", "/conversations/c-one/chunks")["data"]
    import redis

    with redis.Redis.from_url(redis_url, decode_responses=True) as r:
        # The counters stay an hour (a job a recorder holds is a duplicate), then go.
        assert not [n for n in r.scan_iter() if "c-two" in n and not (n.endswith(
            (":seq", ":applied")) and r.pttl(n) > 0)]


def test_export_holds_everything_of_the_user(erin):
    document = erin.ok("GET", "/export")
    assert document["object"] == "memory.export"
    assert document["settings"] == {"memory": True, "auto_extract": True}
    assert document["profile"]["language"] == "en"
    assert "user_name" in {f["key"] for f in document["facts"]}
    one, two = sorted(document["conversations"], key=lambda c: c["id"])
    assert (one["id"], len(one["branches"]), two["id"]) == ("c-one", 1, "c-two")
    assert two["messages"][0]["message"]["content"] == "Zorblax second chat, turn 0."
    assert two["chunks"] and two["chunks"][0]["sources"]


def test_other_users_and_tenants_see_nothing_of_a_user(erin, url):
    converse(url, "acme", BOB, "c-bob", ["My name is Quillon Canary."])
    chat(url, "globex", "x", "warm-up", [{"role": "user", "content": "hi"}])
    bob = Api(url, user=BOB)
    same_id_elsewhere = Api(url, "globex", ERIN, header="X-End-User")
    for api, word in ((bob, "Zorblax"), (same_id_elsewhere, "Zorblax"), (erin, "Quillon")):
        assert word not in repr(api.ok("GET", "/export"))
        assert error(api("GET", "/conversations/c-one" if api is not erin
                         else "/conversations/c-bob"), 404)["code"] == "not_found"
    assert bob.ok("DELETE", "/facts/user_name")["deleted"]  # bob's own fact, not erin's
    assert "user_name" in {f["key"] for f in erin.ok("GET", "/facts")["data"]}
    assert same_id_elsewhere.ok("GET", "/facts")["data"] == []


@pytest.mark.parametrize("api_args, path, status, param", [
    ({"user": None}, "/facts", 400, "X-User-Id"),
    ({"user": "-bad"}, "/settings", 400, "X-User-Id"),
    ({"user": "a" * 129}, "/export", 400, "X-User-Id"),
    ({"tenant": "globex", "user": ERIN}, "/facts", 400, "X-End-User"),
    ({}, "/conversations/-bad", 400, "conversation_id"),
    ({}, "/conversations/nope/chunks", 404, "conversation_id"),
])
def test_bad_requests_are_4xx_in_openai_shape(url, api_args, path, status, param):
    assert error(Api(url, **api_args)("GET", path), status)["param"] == param


def test_a_wrong_key_is_a_401_and_an_unknown_method_a_405(url):
    response = httpx.get(url + "/v1/memory/facts",
                         headers={"Authorization": "Bearer wrong", "X-User-Id": ERIN})
    assert error(response, 401)["code"] == "invalid_api_key"
    wrong = Api(url)("PUT", "/facts")
    assert error(wrong, 405)["type"] == "invalid_request_error"
    # Allow names every method served at the path, also where each has a route of its own.
    assert wrong.headers["allow"] == "GET, HEAD"
    assert Api(url)("POST", "/settings").headers["allow"] == "GET, HEAD, PATCH"
    assert Api(url)("POST", "/conversations/c-one/pins/m1").headers["allow"] == "DELETE, PUT"
    chat = httpx.get(url + "/v1/chat/completions", timeout=30)
    assert chat.status_code == 405 and chat.headers["allow"] == "POST"


def test_deleting_a_conversation_forgets_the_facts_learned_only_from_it(erin):
    facts = {f["key"]: f for f in erin.ok("GET", "/facts")["data"]}
    from_one = {k for k, f in facts.items()
                if f["sources"] and {s["conversation"] for s in f["sources"]} == {"c-one"}}
    assert "user_name" in from_one  # "My name is Zorblax Canary." was said in c-one
    erin.ok("DELETE", "/conversations/c-one")
    after = {f["key"]: f for f in erin.ok("GET", "/facts")["data"]}
    assert not from_one & set(after), "a fact resting only on the deleted conversation stayed"
    gone = {i for k in from_one for i in facts[k]["source_ids"]}
    for fact in after.values():  # what stays points at no deleted message
        assert not gone & set(fact["source_ids"])
        assert all(s["conversation"] != "c-one" for s in fact["sources"])
    # Nor is it recalled: a new conversation of the same user is not told the deleted name.
    response = httpx.post(erin.url + "/v1/chat/completions", timeout=30, headers={
        **erin.headers, "X-Conversation-Id": "c-three"}, json={
        "model": "messages", "messages": [{"role": "user", "content": "What is my name?"}]})
    assert response.status_code == 200, response.text
    sent = forwarded(response.json()["choices"][0]["message"]["content"])
    assert sent[-1]["content"] == "What is my name?"
    assert "Zorblax Canary" not in json.dumps(sent, ensure_ascii=False)


def test_anonymous_conversations_are_listed_and_deleted_by_their_tenant(url, redis_url):
    # Sent without a user id: the conversation belongs to the tenant, reached without the
    # user header (a tenant key, or an admin key naming the tenant).
    for conversation in ("anon-1", "anon-2"):
        response = httpx.post(url + "/v1/chat/completions", timeout=30, headers={
            "Authorization": f"Bearer {KEYS['acme']}", "X-Conversation-Id": conversation},
            json={"model": "echo", "messages": [
                {"role": "user", "content": f"Wuggle canary in {conversation}"}]})
        assert response.status_code == 200, response.text
    populate(url, "acme", ERIN)  # a user's conversations are not the anonymous ones
    anonymous = Api(url, user=None)
    assert sorted(c["id"] for c in anonymous.ok("GET", "/conversations")["data"]) == \
        ["anon-1", "anon-2"]
    assert anonymous.ok("GET", "/conversations/anon-1")["messages"][0]["message"]["content"] \
        == "Wuggle canary in anon-1"
    assert error(Api(url, tenant="globex", user=None)("GET", "/conversations/anon-1"),
                 404)["code"] == "not_found"  # another tenant's key sees none of them
    assert anonymous.ok("DELETE", "/conversations/anon-1")["deleted"] is True
    assert [c["id"] for c in anonymous.ok("GET", "/conversations")["data"]] == ["anon-2"]
    assert {c["id"] for c in Api(url).ok("GET", "/conversations")["data"]} == \
        {"c-one", "c-two"}
    import redis

    with redis.Redis.from_url(redis_url, decode_responses=True) as r:
        assert not [n for n in r.scan_iter() if "anon-1" in n and not (n.endswith(
            (":seq", ":applied")) and r.pttl(n) > 0)]
    # User-level operations still need a user: no erase of "everyone without an id".
    assert error(anonymous("DELETE", ""), 400)["param"] == "X-User-Id"
