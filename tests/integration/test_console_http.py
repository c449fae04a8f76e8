"""The memory console over HTTP (no browser), against the real app and store: who may sign in,
sessions, CSRF and cross-origin posts, escaping, what reaches URLs, the request log, and the
actions (delete, edit, erase, export)."""

from __future__ import annotations

import json
import re
import time

import httpx
import markupsafe
import pytest
import redis

from gateway.config import ConfigError, hash_key, parse_config
from gateway.core.ids import ConversationKey
from gateway.store.keys import KeySpace
from tests.support.console import (ADMIN_KEY, chat, console_config, csrf_of, signed_in,
                                   wait_for_request_log)
from tests.support.gateway import KEYS, running_gateway
from tests.integration.test_memory_erase import converse, memory_config

ERIN = "erin-7Q"
XSS = '<script>alert("owned")</script><img src=x onerror=alert(2)>'
USER_PAGE = f"/console/t/acme/u/{ERIN}"


@pytest.fixture
def url(redis_url):
    with running_gateway(console_config(redis_url)) as base:
        converse(base, "acme", ERIN, "chat-1", [
            "My name is Zorblax Canary.", "I live in Quillonville.", f"Look: {XSS}",
            "我住在北京，我喜欢喝茶。"])
        yield base


def fact_keys(base: str) -> list[str]:
    response = httpx.get(base + "/v1/memory/facts", timeout=10, headers={
        "Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": ERIN})
    return [f["key"] for f in response.json()["data"]]


def test_the_console_is_off_by_default(redis_url):
    with running_gateway(memory_config(redis_url)) as base:
        assert httpx.get(base + "/console", timeout=10).status_code == 404
        assert httpx.get(base + "/console/login", timeout=10).status_code == 404


def test_the_console_needs_admin_keys():
    data = {"tenants": {"acme": {"api_keys": [{"sha256": hash_key("k")}],
                             "models": {"echo": {"model": "fake/echo"}}}},
            "console": {"enabled": True}}
    with pytest.raises(ConfigError, match="console.enabled needs admin.keys"):
        parse_config(data)


@pytest.mark.parametrize("key", [KEYS["acme"], "wrong-admin-key", ""])
def test_a_tenant_key_or_a_wrong_key_does_not_sign_in(url, key):
    client = httpx.Client(base_url=url, timeout=10)
    response = client.post("/console/login", data={"key": key})
    assert response.status_code == 401
    assert "That is not an admin key." in response.text
    assert "gw_console" not in response.headers.get("set-cookie", "")
    assert client.get("/console").status_code == 303  # still signed out


def test_the_session_cookie_holds_a_session_id_never_the_key(url, redis_url):
    response = httpx.post(url + "/console/login", data={"key": ADMIN_KEY}, timeout=10)
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/console" in cookie
    assert ADMIN_KEY not in cookie and hash_key(ADMIN_KEY) not in cookie
    with redis.Redis.from_url(redis_url, decode_responses=True) as store:
        sessions = list(store.scan_iter("gw:console:session:*"))
        assert len(sessions) == 1
        session_id = response.cookies["gw_console"]
        assert session_id not in sessions[0]  # named by a digest of the id
        assert 0 < store.ttl(sessions[0]) <= 3600
        assert ADMIN_KEY not in json.dumps(store.hgetall(sessions[0]))


def test_secure_cookies_by_default(redis_url):
    with running_gateway(console_config(redis_url, secure_cookie=True)) as base:
        response = httpx.post(base + "/console/login", data={"key": ADMIN_KEY}, timeout=10)
        assert "Secure" in response.headers["set-cookie"]


def test_pages_send_a_signed_out_browser_to_sign_in(url):
    for path in ("/console", "/console/t/acme", USER_PAGE, USER_PAGE + "/c/chat-1",
                 USER_PAGE + "/export", "/console/t/acme/requests"):
        response = httpx.get(url + path, timeout=10)
        assert response.status_code == 303 and response.headers["location"] == "/console/login"


def test_signing_out_or_an_expired_session_ends_it(url, redis_url):
    client = signed_in(url)
    page = client.get("/console")
    assert page.status_code == 200
    client.post("/console/logout", data={"csrf": csrf_of(page.text)})
    stale = httpx.get(url + "/console", cookies={"gw_console": client.cookies["gw_console"]}
                      if "gw_console" in client.cookies else {}, timeout=10)
    assert stale.status_code == 303
    # Expiry is the store's: a session whose key expired is gone.
    client = signed_in(url)
    session_id = client.cookies["gw_console"]
    with redis.Redis.from_url(redis_url, decode_responses=True) as store:
        for name in store.scan_iter("gw:console:session:*"):
            store.pexpire(name, 1)
    time.sleep(0.05)
    assert httpx.get(url + "/console", cookies={"gw_console": session_id},
                     timeout=10).status_code == 303


def test_a_post_without_the_sessions_csrf_token_is_refused(url):
    client = signed_in(url)
    [fact, *_] = fact_keys(url)
    for form in ({"key": fact}, {"key": fact, "csrf": "forged"}):
        response = client.post(USER_PAGE + "/facts/delete", data=form)
        assert response.status_code == 403 and "CSRF" in response.text
    # Another session's token is no better.
    other = signed_in(url)
    token = csrf_of(other.get(USER_PAGE).text)
    assert client.post(USER_PAGE + "/facts/delete",
                       data={"key": fact, "csrf": token}).status_code == 403
    assert fact in fact_keys(url)
    # Without a session at all, even with a token.
    assert httpx.post(url + USER_PAGE + "/erase", timeout=10,
                      data={"csrf": token, "confirm": ERIN}).status_code == 403
    assert fact in fact_keys(url)


def test_a_cross_origin_post_is_refused_even_with_the_token(url):
    client = signed_in(url)
    token = csrf_of(client.get(USER_PAGE).text)
    [fact, *_] = fact_keys(url)
    for headers in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
        response = client.post(USER_PAGE + "/facts/delete", data={"key": fact, "csrf": token},
                               headers=headers)
        assert response.status_code == 403
    assert fact in fact_keys(url)
    same = client.post(USER_PAGE + "/facts/delete", data={"key": fact, "csrf": token},
                       headers={"Origin": url, "Sec-Fetch-Site": "same-origin"})
    assert same.status_code == 303
    assert fact not in fact_keys(url)


def test_stored_markup_is_shown_as_text_everywhere(url):
    client = signed_in(url)
    for path in (USER_PAGE + "/c/chat-1", USER_PAGE):
        page = client.get(path)
        assert page.status_code == 200
        assert "<script>alert" not in page.text and "<img src=x" not in page.text
        assert "default-src 'none'; script-src 'self'" in page.headers["content-security-policy"]
    transcript = client.get(USER_PAGE + "/c/chat-1").text
    assert "&lt;script&gt;alert(&#34;owned&#34;)&lt;/script&gt;&lt;img src=x" in transcript
    # The only scripts a page loads are the console's own file.
    assert re.findall(r"<script[^>]*>", transcript) == [
        '<script src="/console/static/console.js" defer>']


def test_chinese_text_is_served_as_utf8(url):
    client = signed_in(url)
    page = client.get(USER_PAGE + "/c/chat-1")
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert '<meta charset="utf-8">' in page.text
    assert "我住在北京，我喜欢喝茶。" in page.text


def test_no_memory_content_reaches_a_url(url):
    """Every link and form target of every page holds ids only, and every form that
    changes something is a POST."""
    client = signed_in(url)
    pages = ["/console", "/console/t/acme", "/console/t/acme?conversation=chat-1", USER_PAGE,
             USER_PAGE + "/c/chat-1", "/console/t/acme/requests"]
    wait_for_request_log(client, "/console/t/acme/requests", "chat-1")
    for path in pages:
        html = client.get(path).text
        targets = re.findall(r'(?:href|action|src)="([^"]*)"', html)
        assert targets
        for target in targets:
            for word in ("Zorblax", "Quillon", "script", "%E5%8C%97", "北京", "alert"):
                assert word not in target, (path, target)
        for method in re.findall(r'<form method="(\w+)" action="([^"]*)"', html):
            assert method[0] == "post" or method[1].startswith("/console/t/acme")
    assert all(method == "post" for method, action in re.findall(
        r'<form method="(\w+)" action="([^"]*)"', client.get(USER_PAGE).text)
        if not action.endswith("/acme"))


def test_the_request_log_shows_requests_without_their_content(url, redis_url):
    client = signed_in(url)
    page = wait_for_request_log(client, "/console/t/acme/requests", "chat-1")
    assert "chat-1" in page and "<svg" in page and "polyline" in page
    with redis.Redis.from_url(redis_url, decode_responses=True) as store:
        entries = store.xrange(KeySpace().request_log("acme"))
        assert len(entries) == 4
        for _id, fields in entries:
            assert fields["user"] == ERIN and fields["conversation"] == "chat-1"
            data = json.loads(fields["data"])
            assert data["tokens_original"] >= data["tokens_forwarded"] > 0
            for word in ("Zorblax", "Quillon", "北京", "script"):
                assert word not in fields["data"]
        last = store.get(KeySpace().last_request(ConversationKey("acme", ERIN, "chat-1")))
        assert json.loads(last)["request_id"] == json.loads(entries[-1][1]["data"])["request_id"]
        # Another tenant's log holds none of it.
        assert store.xlen(KeySpace().request_log("globex")) == 0


def test_the_request_log_is_capped(redis_url):
    with running_gateway(console_config(redis_url, request_log_entries=10)) as base:
        for i in range(150):
            chat(base, ERIN, f"c{i % 3}", [{"role": "user", "content": f"hello {i}"}])
        client = signed_in(base)
        wait_for_request_log(client, "/console/t/acme/requests", "c2")
        with redis.Redis.from_url(redis_url, decode_responses=True) as store:
            # MAXLEN ~ trims whole nodes of the stream: near the cap, far below 150.
            assert 10 <= store.xlen(KeySpace().request_log("acme")) < 150


def test_find_a_conversation_by_id(url):
    client = signed_in(url)
    page = client.get("/console/t/acme", params={"conversation": "chat-1"}).text
    assert f'href="{USER_PAGE}/c/chat-1"' in page
    assert "No user of acme" in client.get("/console/t/acme",
                                           params={"conversation": "nope"}).text
    assert client.get("/console/t/acme", params={"conversation": "bad id!"}).status_code == 400
    assert ERIN in client.get("/console/t/acme").text
    assert ERIN not in client.get("/console/t/globex").text
    assert client.get("/console/t/initech").status_code == 404


def test_editing_a_fact_keeps_its_old_value_in_history(url):
    client = signed_in(url)
    token = csrf_of(client.get(USER_PAGE).text)
    response = client.post(USER_PAGE + "/facts/edit", data={
        "csrf": token, "key": "user_location", "value": "上海"})
    assert response.status_code == 303
    facts = httpx.get(url + "/v1/memory/facts", timeout=10, headers={
        "Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": ERIN}).json()["data"]
    location = next(f for f in facts if f["key"] == "user_location")
    assert location["value"] == "上海" and location["confidence"] == 1.0
    assert location["history"][-1]["value"] == "北京"  # the value before the edit
    assert client.post(USER_PAGE + "/facts/edit", data={
        "csrf": token, "key": "user_location", "value": ""}).status_code == 400


def test_export_is_a_json_download(url):
    client = signed_in(url)
    response = client.get(USER_PAGE + "/export")
    assert response.status_code == 200
    assert response.headers["content-disposition"] == (
        f'attachment; filename="memory-acme-{ERIN}.json"')
    body = response.json()
    assert body["object"] == "memory.export" and body["user"] == ERIN
    assert {f["key"] for f in body["facts"]} == set(fact_keys(url))


def test_erase_and_delete_need_the_id_typed_to_confirm(url, redis_url):
    client = signed_in(url)
    token = csrf_of(client.get(USER_PAGE).text)
    refused = client.post(USER_PAGE + "/c/chat-1/delete", data={"csrf": token,
                                                                "confirm": "chat"})
    assert refused.status_code == 400
    assert client.get(USER_PAGE + "/c/chat-1").status_code == 200
    assert client.post(USER_PAGE + "/erase", data={"csrf": token,
                                                   "confirm": "erin"}).status_code == 400
    wait_for_request_log(client, "/console/t/acme/requests", "chat-1")
    erased = client.post(USER_PAGE + "/erase", data={"csrf": token, "confirm": ERIN})
    assert erased.status_code == 303
    assert client.get(USER_PAGE + "/c/chat-1").status_code == 404
    assert fact_keys(url) == []
    with redis.Redis.from_url(redis_url, decode_responses=True) as store:
        # The user's requests left the tenant's request log too.
        assert store.xlen(KeySpace().request_log("acme")) == 0
        assert not list(store.scan_iter("gw:c:*"))


def test_a_conversations_pins_are_shown_escaped(url):
    chat(url, ERIN, "chat-1", [{"role": "user", "x_gateway_pin": True,
                                "content": "Never quote <b>prices</b> in Quillon dollars."}])
    page = signed_in(url).get(USER_PAGE + "/c/chat-1").text
    pins = page[page.index("<h2>Pinned messages</h2>"):page.index("<h2>Summary chunks</h2>")]
    assert "Never quote &lt;b&gt;prices&lt;/b&gt; in Quillon dollars." in pins
    assert "pinned by client" in pins


def test_a_conversations_topics_are_listed_with_the_current_one_marked(url):
    topics = httpx.get(url + "/v1/memory/conversations/chat-1/topics", timeout=10, headers={
        "Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": ERIN}).json()["data"]
    assert topics  # the memory worker tracked the conversation's topic(s)
    page = signed_in(url).get(USER_PAGE + "/c/chat-1").text
    shown = page[page.index("<h2>Topics</h2>"):page.index("<h2>Summary chunks</h2>")]
    assert shown.count('class="topic"') == len(topics)
    assert shown.count("(current)") == 1
    for topic in topics:
        assert str(markupsafe.escape(topic["label"] or "(no label yet)")) in shown
