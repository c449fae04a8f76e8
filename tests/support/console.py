"""The memory console under test: a config with it on, and a signed-in HTTP client."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx

from gateway.config import Config, hash_key, parse_config
from tests.support.gateway import KEYS

ADMIN_KEY = "console-admin-key-for-tests"


def console_config(redis_url: str, facts_k: int = 0, brief_tokens: int = 0,
                   **console: Any) -> Config:
    """Two tenants with memory (inline recording, the test embedder, compaction after two
    rounds; `facts_k` facts offered per request, memory briefs of `brief_tokens`), admin keys,
    and the console on over plain http."""
    from tests.integration.test_memory_erase import memory_config

    data = memory_config(redis_url).model_dump(mode="json", exclude_defaults=True)
    for tenant in data["tenants"].values():
        tenant.setdefault("memory", {})["facts_k"] = facts_k
        tenant["memory"]["brief_tokens"] = brief_tokens
    data["admin"] = {"keys": [{"sha256": hash_key(ADMIN_KEY)}]}
    data["console"] = {"enabled": True, "secure_cookie": False, **console}
    return parse_config(data)


def chat(base: str, user: str, conversation: str, messages: list[dict[str, Any]],
         model: str = "echo", tenant: str = "acme") -> httpx.Response:
    response = httpx.post(base + "/v1/chat/completions", timeout=30,
                          json={"model": model, "messages": messages},
                          headers={"Authorization": f"Bearer {KEYS[tenant]}", "X-User-Id": user,
                                   "X-Conversation-Id": conversation})
    assert response.status_code == 200, response.text
    return response


def signed_in(base: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=30)
    response = client.post("/console/login", data={"key": ADMIN_KEY})
    assert response.status_code == 303, response.text
    return client


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, "no CSRF token in the page"
    return match.group(1)


def wait_for_request_log(client: httpx.Client, path: str, marker: str,
                         timeout: float = 10.0) -> str:
    """The page at `path` once it shows `marker` (the request history is written by a
    background task just after each request)."""
    deadline = time.monotonic() + timeout
    while True:
        page = client.get(path).text
        if marker in page or time.monotonic() > deadline:
            return page
        time.sleep(0.05)
