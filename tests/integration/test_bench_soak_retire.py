"""The soak's retirer (bench/soak/drive.py, `--retire-minutes`) against the real gateway over
HTTP and a real store: a pass deletes exactly the user's conversations last updated before the
cut-off, through the user control API, and counts them; another user's are never touched."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import httpx

from bench.soak.drive import Tally, idle_conversations, retire_idle
from tests.support.gateway import KEYS, gateway_config, running_gateway


def chat(url: str, user: str, conversation: str) -> None:
    response = httpx.post(url + "/v1/chat/completions", json={
        "model": "echo", "messages": [{"role": "user", "content": f"hello from {conversation}"}]},
        headers={"Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": user,
                 "X-Conversation-Id": conversation})
    assert response.status_code == 200, response.text


def conversations(url: str, user: str) -> set[str]:
    listed = httpx.get(url + "/v1/memory/conversations",
                       headers={"Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": user})
    return {c["id"] for c in listed.json()["data"]}


async def one_pass(url: str, users: list[tuple[str, str]], before: float,
                   tally: Tally) -> list[str]:
    async with aiohttp.ClientSession() as session:
        await retire_idle(session, url, users, before, tally)
        headers = {"Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": users[0][1]}
        return await idle_conversations(session, url, headers, time.time() + 60)


def test_a_pass_deletes_only_the_conversations_idle_since_before_the_cut(redis_url):
    with running_gateway(gateway_config(redis_url)) as url:
        chat(url, "ana", "old-1")
        chat(url, "ana", "old-2")
        chat(url, "bo", "bo-old")
        time.sleep(0.05)
        cut = time.time()
        time.sleep(0.05)
        chat(url, "ana", "new")
        tally = Tally()
        left = asyncio.run(one_pass(url, [(KEYS["acme"], "ana")], cut, tally))

        assert tally.outcomes["retired"] == 2 and tally.outcomes["error"] == 0
        assert left == ["new"] and conversations(url, "ana") == {"new"}
        assert conversations(url, "bo") == {"bo-old"}
