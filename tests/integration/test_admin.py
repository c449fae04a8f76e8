"""Admin keys over HTTP, against the real app and store: an admin key reaches any tenant's
users through the user-control API (the tenant named in `X-Gateway-Tenant`) and `/metrics`;
it is no tenant key, and no tenant key is an admin key."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from gateway.config import hash_key, parse_config
from gateway.errors import ConfigError
from tests.support.gateway import KEYS, running_gateway
from tests.integration.test_memory_erase import BOB, ERIN, converse, memory_config

ADMIN_KEY = "admin-key-for-tests"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def admin_config(redis_url: str, **admin: Any):
    config = memory_config(redis_url, headers={"globex": {"user_id": "X-End-User"}})
    data = config.model_dump(mode="json", exclude_defaults=True)
    data["admin"] = {"keys": [{"sha256": hash_key(ADMIN_KEY)}], **admin}
    return parse_config(data)


@pytest.fixture
def url(redis_url):
    with running_gateway(admin_config(redis_url)) as base:
        converse(base, "acme", ERIN, "acme-chat", ["My name is Zorblax Canary."])
        response = httpx.post(base + "/v1/chat/completions", timeout=30, json={
            "model": "echo", "messages": [{"role": "user", "content": "I am Vextra Canary."}]},
            headers={"Authorization": f"Bearer {KEYS['globex']}", "X-End-User": ERIN,
                     "X-Conversation-Id": "globex-chat"})
        assert response.status_code == 200, response.text
        yield base


def error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()["error"]
    assert set(body) == {"message", "type", "param", "code"}
    return body


def memory(url: str, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
    return httpx.request(method, url + "/v1/memory" + path, headers=headers, timeout=30)


def conversation_ids(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [c["id"] for c in response.json()["data"]]


def test_an_admin_key_reads_any_tenants_user_with_that_tenants_user_header(url):
    acme = memory(url, "GET", "/conversations",
                  {**ADMIN, "X-Gateway-Tenant": "acme", "X-User-Id": ERIN})
    assert conversation_ids(acme) == ["acme-chat"]
    # globex names its users in its own header; the admin uses the tenant's header.
    globex = memory(url, "GET", "/conversations",
                    {**ADMIN, "X-Gateway-Tenant": "globex", "X-End-User": ERIN})
    assert conversation_ids(globex) == ["globex-chat"]
    transcript = memory(url, "GET", "/conversations/globex-chat",
                        {**ADMIN, "X-Gateway-Tenant": "globex", "X-End-User": ERIN}).json()
    assert "Vextra" in str(transcript) and "Zorblax" not in str(transcript)


def test_an_admin_key_erases_one_tenants_user_and_leaves_the_others(url):
    erased = memory(url, "DELETE", "", {**ADMIN, "X-Gateway-Tenant": "acme", "X-User-Id": ERIN})
    assert erased.status_code == 200, erased.text
    tenant_view = {"Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": ERIN}
    assert conversation_ids(memory(url, "GET", "/conversations", tenant_view)) == []
    globex_view = {"Authorization": f"Bearer {KEYS['globex']}", "X-End-User": ERIN}
    assert conversation_ids(memory(url, "GET", "/conversations", globex_view)) == [
        "globex-chat"]


@pytest.mark.parametrize("headers, status, param", [
    ({"X-User-Id": ERIN}, 400, "X-Gateway-Tenant"),                          # no tenant named
    ({"X-Gateway-Tenant": "initech", "X-User-Id": ERIN}, 404, "X-Gateway-Tenant"),
    ({"X-Gateway-Tenant": "acme"}, 400, "X-User-Id"),                         # no user named
    ({"X-Gateway-Tenant": "acme", "X-User-Id": "bad id"}, 400, "X-User-Id"),
])
def test_an_admin_request_must_name_a_known_tenant_and_a_user(url, headers, status, param):
    problem = error(memory(url, "GET", "/facts", {**ADMIN, **headers}), status)
    assert problem["param"] == param


def test_a_tenant_key_never_reaches_another_tenant(url):
    acme = {"Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": ERIN}
    problem = error(memory(url, "GET", "/conversations", {**acme, "X-Gateway-Tenant": "globex"}),
                    403)
    assert problem["code"] == "insufficient_permissions"
    # Naming its own tenant is allowed, and changes nothing.
    assert conversation_ids(memory(url, "GET", "/conversations",
                                   {**acme, "X-Gateway-Tenant": "acme"})) == ["acme-chat"]


def test_a_tenant_key_is_no_admin_key_for_metrics(url):
    for headers in ({}, {"Authorization": f"Bearer {KEYS['acme']}"},
                    {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"}):
        problem = error(httpx.get(url + "/metrics", headers=headers, timeout=10), 401)
        assert problem["code"] == "invalid_api_key"
    response = httpx.get(url + "/metrics", headers=ADMIN, timeout=10)
    assert response.status_code == 200
    assert "gateway_requests_total" in response.text


def test_an_admin_key_is_no_tenant_key(url):
    client = openai.OpenAI(base_url=url + "/v1", api_key=ADMIN_KEY, max_retries=0,
                           default_headers={"X-Conversation-Id": "by-admin"})
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="echo",
                                       messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.AuthenticationError):
        client.models.list()
    # Without the tenant header the admin has no tenant, so no user's memory either.
    assert memory(url, "GET", "/facts", {**ADMIN, "X-User-Id": BOB}).status_code == 400


def test_metrics_stay_public_without_admin_keys_or_when_switched_public(redis_url):
    plain = memory_config(redis_url)
    switched = admin_config(redis_url, metrics_public=True)
    for config in (plain, switched):
        with running_gateway(config) as base:
            assert httpx.get(base + "/metrics", timeout=10).status_code == 200


def test_an_admin_key_configured_as_a_tenant_key_fails_at_start_up(redis_url):
    data = memory_config(redis_url).model_dump(mode="json", exclude_defaults=True)
    data["admin"] = {"keys": [{"sha256": hash_key(KEYS["globex"])}]}
    with pytest.raises(ConfigError, match=r"admin\.keys\.0: .* tenant globex"):
        parse_config(data)
