"""Hostile input at the Anthropic Messages and OpenAI Responses doors gets a 4xx in that
dialect's error shape, never a 5xx. The real app over HTTP, a real store, the fake upstream;
seeded, so every run sends the same requests. The counts are printed."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any, Callable

import httpx

from tests.integration.test_hostile_input import Hostile
from tests.support.gateway import KEYS, gateway_config, running_gateway
from tests.support.processes import report

SEED = 20261126
REQUESTS = 1_000
CONVERSATIONS = 20
"""The requests spread over this many conversations: each stays short, as real ones are (one
conversation taking every accepted turn makes the inline memory work grow with the run)."""


class HostileAnthropic(Hostile):
    def block(self) -> Any:
        kind = self.rng.choice(["text", "image", "tool_use", "tool_result", "thinking",
                                "document", "bogus", None, self.string()])
        block: dict[str, Any] = {"type": kind}
        for name in self.rng.sample(["text", "source", "id", "name", "input", "tool_use_id",
                                     "content", "cache_control", "thinking", "signature"],
                                    self.rng.randint(0, 4)):
            block[name] = self.value()
        if kind == "text" and self.rng.random() < 0.6:
            block["text"] = self.string()
        return block if self.rng.random() < 0.9 else self.value()

    def anthropic_message(self) -> Any:
        content = self.rng.choice([self.string(), [self.block() for _ in range(3)],
                                   self.value(), []])
        return {"role": self.rng.choice(["user", "user", "assistant", "system", None]),
                "content": content}

    def plausible(self) -> dict[str, Any]:
        """A valid request but for odd text where a client's text goes, and odd tools."""
        messages: list[Any] = []
        for _ in range(self.rng.randint(0, 2)):
            messages += [{"role": "user", "content": self.string()},
                         {"role": "assistant", "content": [{"type": "text",
                                                            "text": self.string()}]}]
        messages.append({"role": "user", "content": self.rng.choice(
            [self.string(), [{"type": "text", "text": self.string()}]])})
        body: dict[str, Any] = {"model": self.rng.choice(["echo", "messages", "tool-call"]),
                                "max_tokens": 64, "messages": messages,
                                "stream": self.rng.random() < 0.4}
        if self.rng.random() < 0.3:
            body["system"] = self.string()
        if self.rng.random() < 0.3:
            body["tools"] = [{"name": "f", "input_schema": {"type": "object"}}]
        if self.rng.random() < 0.2:
            body["metadata"] = {"user_id": self.string()}
        return body

    def body(self) -> Any:
        if self.rng.random() < 0.4:
            return self.plausible()
        if self.rng.random() < 0.05:
            return self.value()
        body: dict[str, Any] = {"model": self.rng.choice(["echo", "messages", self.value()]),
                                "max_tokens": self.rng.choice([64, 64, 0, -1, "x", None, 1.5]),
                                "messages": [self.anthropic_message()
                                             for _ in range(self.rng.randint(0, 4))]}
        for name in ("system", "stream", "tools", "tool_choice", "stop_sequences", "metadata",
                     "temperature", "thinking"):
            if self.rng.random() < 0.2:
                body[name] = self.value()
        if self.rng.random() < 0.3:
            body["stream"] = True
        return body


def anthropic_shape(response: httpx.Response) -> bool:
    body = response.json()
    return body.get("type") == "error" and set(body["error"]) == {"type", "message"}


def fuzz(url: str, path: str, bodies: list[bytes],
         shaped: Callable[[httpx.Response], bool]) -> tuple[Counter[int], list[str], list[str]]:
    statuses: Counter[int] = Counter()
    failures: list[str] = []
    misshapen: list[str] = []

    async def run() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60,
                                     limits=httpx.Limits(max_connections=16)) as client:
            semaphore = asyncio.Semaphore(16)

            async def one(i: int, body: bytes) -> None:
                async with semaphore:
                    try:
                        response = await client.post(path, content=body, headers={
                            "x-api-key": KEYS["acme"], "Authorization": f"Bearer {KEYS['acme']}",
                            "X-Conversation-Id": f"fuzz-{i % CONVERSATIONS}",
                            "X-User-Id": "fuzz-user"})
                    except httpx.TransportError as exc:
                        statuses[599] += 1
                        failures.append(f"{body[:200]!r} -> connection {exc!r}")
                        return
                statuses[response.status_code] += 1
                if response.status_code >= 500:
                    failures.append(f"{body[:200]!r} -> {response.status_code} "
                                    f"{response.text[:200]}")
                elif response.status_code >= 400:
                    try:
                        ok = shaped(response)
                    except Exception:  # noqa: BLE001 — collected and asserted by the caller
                        ok = False
                    if not ok:
                        misshapen.append(f"{response.status_code} {response.text[:150]}")

            await asyncio.gather(*(one(i, b) for i, b in enumerate(bodies)))

    asyncio.run(run())
    return statuses, failures, misshapen


def test_fuzz_messages_door_never_gets_a_5xx(redis_url):
    hostile = HostileAnthropic(SEED)
    bodies = [hostile.dumps(hostile.body()) for _ in range(REQUESTS)]
    with running_gateway(gateway_config(redis_url)) as url:
        statuses, failures, misshapen = fuzz(url, "/v1/messages", bodies, anthropic_shape)
    report("hostile Messages fuzz", seed=SEED, requests=sum(statuses.values()),
           by_status=dict(sorted(statuses.items())))
    assert sum(statuses.values()) == REQUESTS
    assert statuses[200] > 0 and statuses[400] > 0  # both kinds were really sent
    assert failures == [], "\n".join(failures[:20])
    assert misshapen == [], "\n".join(misshapen[:20])


class HostileResponses(Hostile):
    def item(self) -> Any:
        kind = self.rng.choice(["message", "message", "function_call", "function_call_output",
                                "reasoning", "item_reference", None, self.string()])
        item: dict[str, Any] = {"type": kind} if kind else {}
        if kind in ("message", None):
            item["role"] = self.rng.choice(["user", "assistant", "system", "developer", "tool",
                                            None])
            item["content"] = self.rng.choice([
                self.string(), self.value(),
                [{"type": self.rng.choice(["input_text", "output_text", "input_image",
                                           "input_file", "refusal"]),
                  "text": self.string(), "image_url": self.value()}]])
        for name in self.rng.sample(["call_id", "name", "arguments", "output", "id"],
                                    self.rng.randint(0, 3)):
            item[name] = self.rng.choice([self.string(), self.value()])
        return item if self.rng.random() < 0.9 else self.value()

    def body(self) -> Any:
        if self.rng.random() < 0.05:
            return self.value()
        body: dict[str, Any] = {"model": self.rng.choice(["echo", "messages", self.value()])}
        body["input"] = self.string() if self.rng.random() < 0.35 else \
            [self.item() for _ in range(self.rng.randint(0, 4))]
        for name in ("instructions", "previous_response_id", "store", "tools", "tool_choice",
                     "text", "max_output_tokens", "metadata", "reasoning", "user",
                     "background", "conversation", self.string()[:12]):
            if self.rng.random() < 0.12:
                body[name] = self.value()
        if self.rng.random() < 0.3:
            body["stream"] = True
        return body


def openai_shape(response: httpx.Response) -> bool:
    return set(response.json()["error"]) == {"message", "type", "param", "code"}


def test_fuzz_responses_door_never_gets_a_5xx(redis_url):
    hostile = HostileResponses(SEED)
    bodies = [hostile.dumps(hostile.body()) for _ in range(REQUESTS)]
    with running_gateway(gateway_config(redis_url)) as url:
        statuses, failures, misshapen = fuzz(url, "/v1/responses", bodies, openai_shape)
    report("hostile Responses fuzz", seed=SEED, requests=sum(statuses.values()),
           by_status=dict(sorted(statuses.items())))
    assert sum(statuses.values()) == REQUESTS
    assert statuses[200] > 0 and statuses[400] > 0
    assert failures == [], "\n".join(failures[:20])
    assert misshapen == [], "\n".join(misshapen[:20])
