"""The conversations of a run and the request bodies every target gets.

For each conversation length N the bench stores an N-turn conversation in the gateway (its
own user, so recall over "the user's other conversations" finds nothing of the other lengths),
waits until the recorder and the memory worker have applied and indexed all of it, and reads
the transcript back. Then:

- the *full* body is what a stateless client sends: the N stored turns plus a new question;
- the *forwarded* body is what the gateway sends upstream for that request, seen through the
  fake's `echo-messages` model with persistence off (same conversation, same budget).

Each body comes in a few variants that differ only in the question, sent in turn, so no cache
keyed on the whole body (or on the current message) serves a request from an earlier one; a
real client asks something new each time. N = 0 is a conversation with nothing stored.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from bench.dialects import in_dialect
from bench.overhead.load import Bodies, encode, new_session, request_body
from bench.overhead.stack import CAPTURE_MODEL, Stack

USER_TEXT = ("Turn {i}: notes on the quarterly plan — the team reviewed budgets, hiring, the "
             "migration of the billing service, open incidents and the roadmap for search; "
             "decisions were recorded with owners and dates, and follow-ups were assigned for "
             "the security review, the customer interviews and the load tests of the new "
             "storage layer before the next release window closes.")
REPLY_TEXT = ("Noted for turn {i}: the billing migration stays on track for the next window, the "
              "owners are confirmed for the security review and the customer interviews, and "
              "the budget question goes back to finance; I will track the load tests of the new "
              "storage layer and remind the team a week before the release window closes.")
QUESTION = ("What did we decide about the billing migration, and who owns the follow-up? "
            "(question {k})")
VARIANTS = 8
IDLE_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Conversation:
    """One stored conversation and the bodies measured against it."""

    turns: int
    conversation_id: str
    user: str
    history: tuple[dict[str, Any], ...]
    """The stored transcript as the client resends it (role and content), oldest first."""
    forwarded: tuple[tuple[dict[str, Any], ...], ...]
    """Per question variant: the messages the gateway forwarded for history + that question."""
    tokens_full: int
    """Tokens of history + question as the gateway counts them (x-gateway-tokens-original)."""
    tokens_forwarded: int
    """Tokens the gateway forwarded (x-gateway-tokens-forwarded)."""
    prepare_s: float

    def full_bodies(self, stream: bool, dialect: str = "chat") -> Bodies:
        return Bodies.of([in_dialect(request_body([*self.history, question(k)], stream=stream),
                                     dialect) for k in range(VARIANTS)])

    def forwarded_bodies(self, stream: bool) -> Bodies:
        return Bodies.of([request_body(messages, stream=stream) for messages in self.forwarded])

    def meta(self) -> dict[str, Any]:
        full, forwarded = self.full_bodies(False), self.forwarded_bodies(False)
        return {"turns": self.turns, "conversation_id": self.conversation_id, "user": self.user,
                "stored_messages": len(self.history),
                "full_body": {"tokens": self.tokens_full, "bytes": full.size,
                              "messages": len(self.history) + 1},
                "forwarded_body": {"tokens": self.tokens_forwarded, "bytes": forwarded.size,
                                   "messages": len(self.forwarded[0])},
                "prepare_s": round(self.prepare_s, 1)}


def question(k: int) -> dict[str, str]:
    return {"role": "user", "content": QUESTION.format(k=k)}


def seed_messages(turns: int) -> list[dict[str, str]]:
    """The first `turns` - 1 turns (user, assistant) and the N-th user message: the fake's
    reply to it completes the N-th turn."""
    messages: list[dict[str, str]] = []
    for i in range(1, turns):
        messages += [{"role": "user", "content": USER_TEXT.format(i=i)},
                     {"role": "assistant", "content": REPLY_TEXT.format(i=i)}]
    if turns:
        messages.append({"role": "user", "content": USER_TEXT.format(i=turns)})
    return messages


async def prepare(stack: Stack, turns: int) -> Conversation:
    """Store an N-turn conversation, wait until it is applied and indexed, and capture what
    the gateway forwards for it."""
    started = time.monotonic()
    conversation = f"bench-{turns}-" + secrets.token_hex(4)
    user = f"bench-user-{turns}-" + secrets.token_hex(3)
    history: tuple[dict[str, Any], ...] = ()
    async with new_session(1, 120.0) as session:
        if turns:
            # One request of a stateless client that sends its first N - 1 turns and the N-th
            # question: the gateway stores all of it as one turn record, and the memory worker
            # indexes the whole transcript in one run (as it coalesces any burst of turns).
            seed = stack.target("gateway-memory", conversation=conversation, user=user,
                                persist=True)
            await _post(session, seed.url, seed.headers, request_body(seed_messages(turns),
                                                                      stream=False))
            await wait_idle(stack)
            history = await _transcript(session, stack, conversation, user)
            if len(history) != 2 * turns:
                raise RuntimeError(f"the {turns}-turn conversation stored {len(history)} "
                                   f"messages, expected {2 * turns}")
        probe = stack.target("gateway-memory", conversation=conversation, user=user,
                             persist=False)
        forwarded, tokens_full, tokens_forwarded = [], -1, -1
        for k in range(VARIANTS):
            body = request_body([*history, question(k)], stream=False, model=CAPTURE_MODEL)
            answer, headers = await _post(session, probe.url, probe.headers, body)
            forwarded.append(tuple(json.loads(answer["choices"][0]["message"]["content"])))
            if k == 0:
                tokens_full = int(headers.get("x-gateway-tokens-original", -1))
                tokens_forwarded = int(headers.get("x-gateway-tokens-forwarded", -1))
    return Conversation(turns, conversation, user, history, tuple(forwarded), tokens_full,
                        tokens_forwarded, time.monotonic() - started)


async def wait_idle(stack: Stack, timeout_s: float = IDLE_TIMEOUT_S) -> float:
    """Wait until the recorder has applied every turn and the memory worker has processed
    every changed conversation (read from the store: nothing undelivered or unacknowledged in
    the record stream, no conversation marked dirty); returns the seconds waited."""
    import redis.asyncio as aioredis

    from gateway.store.keys import KeySpace

    keys = KeySpace()
    started = time.monotonic()
    client = aioredis.Redis(unix_socket_path=str(stack.store_socket))
    try:
        calm = 0
        while calm < 2:  # idle twice in a row, 0.3 s apart: not a gap between two runs
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"the gateway's recorder/memory worker still busy after "
                                   f"{timeout_s:.0f} s")
            calm = calm + 1 if await _idle(client, keys) else 0
            await asyncio.sleep(0.3)
    finally:
        await client.aclose()
    return time.monotonic() - started


async def _idle(client: Any, keys: Any) -> bool:
    if await client.zcard(keys.memory_dirty):
        return False
    if not await client.exists(keys.records):
        return True
    # A stream without its consumer group yet is not idle: the worker process (started after
    # the server is ready) has not read it. Every group must have delivered the stream's last
    # entry and have none pending (`lag` may be unknown: compare the ids instead).
    last = (await client.xinfo_stream(keys.records))["last-generated-id"]
    groups = await client.xinfo_groups(keys.records)
    return bool(groups) and all(not g["pending"] and g["last-delivered-id"] == last
                                for g in groups)


async def _transcript(session: Any, stack: Stack, conversation: str,
                      user: str) -> tuple[dict[str, Any], ...]:
    headers = {"Authorization": f"Bearer {stack.gateway_key}", "X-User-Id": user}
    async with session.get(stack.conversation_url(conversation), headers=headers) as response:
        if response.status != 200:
            raise RuntimeError(f"reading back conversation {conversation} failed: HTTP "
                               f"{response.status} {await response.text()}")
        view = await response.json()
    return tuple({"role": m["message"]["role"], "content": m["message"]["content"]}
                 for m in view["messages"])


async def stored_messages(stack: Stack, conversation: Conversation) -> int:
    """How many messages the conversation's active branch holds now."""
    async with new_session(1, 60.0) as session:
        return len(await _transcript(session, stack, conversation.conversation_id,
                                     conversation.user))


async def _post(session: Any, url: str, headers: dict[str, str],
                body: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    async with session.post(url, data=encode(body),
                            headers={"Content-Type": "application/json", **headers}) as response:
        text = await response.text()
        if response.status != 200:
            raise RuntimeError(f"preparing the conversation failed: HTTP {response.status} "
                               f"{text[:300]}")
        return json.loads(text), response.headers
