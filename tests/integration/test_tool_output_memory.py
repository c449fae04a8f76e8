"""Tool output is not user memory: an agent session's tool results and one-shot placeholders are
never recalled into the same user's other conversations — the results unless the tenant allows
it (`memory.recall_tool_results`), the placeholders never.

End to end: the real app over HTTP, the real openai SDK as an agent client (stateless: it resends
its whole loop each step), a real store, inline recording (the recorder and the memory worker —
turn index, user recall index, summaries, facts, profile, topics, pins — have run when a reply
returns). What the upstream was sent is read with the `fake/echo-messages` behaviour, asked with
`X-Gateway-Persist: false` so the echoed answer is not stored."""

from __future__ import annotations

import json
from typing import Any, Iterator

import anthropic
import openai
import pytest
import redis

from gateway.core.ids import ConversationKey
from gateway.core.messages import Message, StoredMessage, chain
from gateway.core.one_shot import MARKER, placeholder
from gateway.memory.jobs.turn_index import TurnEntry
from gateway.memory.records.keys import MemoryKeySpace
from tests.integration.test_user_memory import Memory as UserMemory
from tests.support.gateway import KEYS, forwarded, gateway_config, running_gateway

SMALL_CANARY, BIG_CANARY, DOC_CANARY = "Kp3SeedCanary", "Qx7FileCanary", "Vz9DocCanary"
TASK = "Can you find the flaky test in the billing module and tell me why it fails?"
TOOLS = [{"type": "function", "function": {
    "name": "run", "description": "Run a shell command.",
    "parameters": {"type": "object", "properties": {"input": {"type": "string"}}}}}]
# Over the one-shot threshold (8,000 characters): stored as a placeholder.
BIG_RESULT = f"def test_invoice_rounding(): assert total() == {BIG_CANARY}\n" * 200
SMALL_RESULT = (f"FAILED tests/test_billing.py::test_invoice_rounding - the billing test failed "
                f"with random seed {SMALL_CANARY}")
DOCUMENT = f"Release notes, not to keep: the billing freeze word is {DOC_CANARY}. " * 5
REMINDER = "<system-reminder>Stay on the task.</system-reminder>"
QUESTION = "Which billing test failed before, and with which random seed?"


@pytest.fixture
def gateway_url(redis_url: str) -> Iterator[str]:
    # acme keeps the default; globex lets tool results reach its users' other conversations.
    # Summaries of every round beyond the last: the session's loop becomes a summary chunk.
    compaction = {"min_rounds": 1, "recent_window_turns": 1}
    config = gateway_config(redis_url, models={"tool-call": {"model": "fake/tool-call"}},
                            tenant={"memory": {"compaction": compaction}},
                            per_tenant={"globex": {"memory": {"compaction": compaction,
                                                              "recall_tool_results": True}}})
    with running_gateway(config) as url:
        yield url


def client(url: str, tenant: str, conversation: str, user: str,
           persist: bool = True) -> openai.OpenAI:
    headers = {"X-Conversation-Id": conversation, "X-User-Id": user}
    if not persist:
        headers["X-Gateway-Persist"] = "false"
    return openai.OpenAI(base_url=url + "/v1", api_key=KEYS[tenant], max_retries=0,
                         default_headers=headers)


def agent_session(url: str, tenant: str, conversation: str, user: str) -> None:
    """A user task, two tool calls answered by a large result (one-shot) and a small one, the
    final answer; then a document the user marks one-shot, and a last turn. Each step resends
    the whole conversation, as an agent client does."""
    agent = client(url, tenant, conversation, user)
    messages: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    for result in (BIG_RESULT, SMALL_RESULT):
        step = agent.chat.completions.create(model="tool-call", messages=messages, tools=TOOLS)
        call = step.choices[0].message.tool_calls[0]
        messages += [step.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": result}]
    final = agent.chat.completions.create(model="echo", messages=messages, tools=TOOLS)
    assert final.choices[0].message.content == TASK  # `echo`: the last user message
    messages += [final.choices[0].message.model_dump(exclude_none=True),
                 {"role": "user", "content": DOCUMENT, MARKER: True},
                 {"role": "user", "content": "Summarise the document above."}]
    summary = agent.chat.completions.create(model="echo", messages=messages, tools=TOOLS)
    messages += [summary.choices[0].message.model_dump(exclude_none=True),
                 {"role": "user", "content": "Thanks, that is all for today."}]
    agent.chat.completions.create(model="echo", messages=messages, tools=TOOLS)


def recalled(url: str, tenant: str, conversation: str, user: str) -> str:
    """What the upstream was sent, besides the question itself, for QUESTION asked in a new
    conversation of `user` (not stored)."""
    reply = client(url, tenant, conversation, user, persist=False).chat.completions.create(
        model="messages", messages=[{"role": "user", "content": QUESTION}])
    sent = forwarded(reply.choices[0].message.content)
    assert sent[-1] == {"role": "user", "content": QUESTION}
    return json.dumps(sent[:-1], ensure_ascii=False)


def test_an_agent_sessions_tool_output_is_not_recalled_in_the_users_next_conversation(
        gateway_url):
    agent_session(gateway_url, "acme", "agent", "uma")

    text = recalled(gateway_url, "acme", "next", "uma")
    assert "flaky test in the billing module" in text  # the user's own words are memory
    assert SMALL_CANARY not in text and BIG_CANARY not in text and DOC_CANARY not in text
    assert "[one-shot" not in text and "not stored]" not in text


def test_with_the_tenant_setting_the_small_tool_result_is_recalled_never_a_placeholder(
        gateway_url):
    agent_session(gateway_url, "globex", "agent", "uma")

    text = recalled(gateway_url, "globex", "next", "uma")
    assert SMALL_CANARY in text
    assert BIG_CANARY not in text
    assert "[one-shot" not in text and "not stored]" not in text


def test_a_claude_code_like_session_through_the_anthropic_door_is_not_recalled_either(
        gateway_url):
    # `tool_result` blocks (the door makes them `tool` messages), a reminder after them.
    claude = anthropic.Anthropic(base_url=gateway_url, api_key=KEYS["acme"], max_retries=0,
                                 default_headers={"X-Conversation-Id": "claude",
                                                  "X-User-Id": "uma"})
    tools = [{"name": "run", "description": "Run a shell command.",
              "input_schema": TOOLS[0]["function"]["parameters"]}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    for result in (BIG_RESULT, SMALL_RESULT):
        step = claude.messages.create(model="tool-call", max_tokens=64, tools=tools,
                                      messages=messages)
        call = step.content[-1]
        assert call.type == "tool_use"
        messages += [{"role": "assistant", "content": [b.model_dump() for b in step.content]},
                     {"role": "user", "content": [
                         {"type": "tool_result", "tool_use_id": call.id, "content": result},
                         {"type": "text", "text": REMINDER}]}]
    claude.messages.create(model="echo", max_tokens=64, tools=tools, messages=messages)

    text = recalled(gateway_url, "acme", "next", "uma")
    assert "flaky test in the billing module" in text
    assert SMALL_CANARY not in text and BIG_CANARY not in text
    assert "[one-shot" not in text and "not stored]" not in text


def test_no_memory_layer_keeps_a_placeholder_or_by_default_a_tool_result_for_the_user(
        gateway_url, redis_url):
    agent_session(gateway_url, "acme", "agent", "uma")
    keys = MemoryKeySpace()
    conversation = keys.conversation(ConversationKey("acme", "uma", "agent"))
    user = keys.user("acme", "uma")
    with redis.Redis.from_url(redis_url, decode_responses=True) as r:
        turns = [json.loads(v) for v in r.hgetall(conversation.turns).values()]
        # The conversation's own index: the user's and the assistant's words and the small
        # tool result, no placeholder.
        assert sorted(t["role"] for t in turns) == ["assistant"] * 3 + ["tool"] + ["user"] * 3
        assert not [t for t in turns if "[one-shot" in t["text"]]
        # The user's index: what the user and the assistant said, no tool output.
        mirrored = [json.loads(v) for v in r.hgetall(user.recall).values()]
        assert [e for e in mirrored if e["kind"] == "turn" and e["role"] == "tool"] == []
        assert SMALL_CANARY not in repr(mirrored)
        # The loop's summary is of the user's and the assistant's words.
        chunks = [json.loads(c)["text"] for c in r.lrange(conversation.chunks, 0, -1)]
        assert "flaky test" in " ".join(chunks)
        assert SMALL_CANARY not in " ".join(chunks)
        # Nothing else of the user's memory (facts, profile, pins, topics, chunks) holds
        # either: every key of the tenant but the transcript and its record stream.
        for name in r.scan_iter():
            if name.endswith((":transcript", ":archive")) or "stream" in name:
                continue
            kind = r.type(name)
            value = {"hash": r.hgetall, "list": lambda n: r.lrange(n, 0, -1),
                     "set": r.smembers, "string": r.get}.get(kind, lambda n: "")(name)
            assert "[one-shot" not in repr(value), name


# -- indexes written before this rule, against the store directly -----------------------------

def loop(created_at: float) -> tuple[StoredMessage, ...]:
    """TASK, a tool-call-only step answered by a placeholder, another by SMALL_RESULT, a reply."""
    def calls(n: int) -> Message:
        return Message.of("assistant", None, tool_calls=[{"id": f"call_{n}", "type": "function",
                                                          "function": {"name": "run",
                                                                       "arguments": "{}"}}])
    big = Message.of("tool", BIG_RESULT, tool_call_id="call_1")
    return chain(None, [Message.of("user", TASK), calls(1), placeholder(big), calls(2),
                        Message.of("tool", SMALL_RESULT, tool_call_id="call_2"),
                        Message.of("assistant", "The invoice rounding test depends on a seed.")],
                 created_at=created_at)


class Memory(UserMemory):
    """What the memory worker writes (turn index, user recall index) and recall reads."""

    async def index_as_before(self, key: ConversationKey,
                              transcript: tuple[StoredMessage, ...]) -> None:
        """The indexes as they were written before placeholders and tool results were left
        out: the placeholder indexed as a turn, everything mirrored."""
        await self.indexer.sync(key, transcript)
        spot = transcript[2]
        entry = TurnEntry(id=spot.id, position=2, role="tool", text=spot.message.text,
                          anchor_date=None, created_at=spot.created_at,
                          previous=transcript[0].id,
                          embed_text=f"{TASK}\n{spot.message.text}")
        await self.indexer._add(key.tenant, self.indexer.keys.conversation(key), [entry])
        await self.user_index.sync(key, transcript, tool_results=True)


@pytest.fixture
async def memory(redis_client) -> Any:
    m = Memory(redis_client)
    yield m
    m.close()


def texts(recalled: list[Any]) -> str:
    return "\n".join(r.text for r in recalled)


async def test_recall_leaves_out_placeholders_and_tool_results_an_older_index_holds(memory):
    old, new = ConversationKey("acme", "uma", "old"), ConversationKey("acme", "uma", "new")
    await memory.index_as_before(old, loop(1.0))
    await memory.user_index.sync(new, chain(None, [Message.of("user", "Hello.")],
                                            created_at=2.0))
    kept = await memory.recaller.recall(new, QUESTION, k=20, successors_of="all")
    assert TASK in texts(kept)  # the user's words of the other conversation are recalled
    assert SMALL_CANARY not in texts(kept) and "[one-shot" not in texts(kept)
    allowed = await memory.recaller.recall(new, QUESTION, k=20, successors_of="all",
                                           tool_results=True)
    assert SMALL_CANARY in texts(allowed) and "[one-shot" not in texts(allowed)
    # Within its own conversation a tool result is recalled, a placeholder never.
    own = await memory.recaller.recall(old, QUESTION, k=20, successors_of="all")
    assert SMALL_CANARY in texts(own) and "[one-shot" not in texts(own)


async def test_the_next_run_removes_what_an_older_index_held(memory, redis_client):
    key = ConversationKey("acme", "uma", "old")
    transcript = loop(1.0)
    await memory.index_as_before(key, transcript)
    grown = transcript + chain(transcript[-1].id, [Message.of("user", "Thanks!")],
                               created_at=2.0)
    await memory.indexer.sync(key, grown)
    await memory.user_index.sync(key, grown)
    keys = MemoryKeySpace()
    turns = [json.loads(v) for v in
             (await redis_client.hgetall(keys.conversation(key).turns)).values()]
    assert sorted(t["role"] for t in turns) == ["assistant", "tool", "user", "user"]
    assert not [t for t in turns if "[one-shot" in t["text"]]
    mirrored = [json.loads(v) for v in
                (await redis_client.hgetall(keys.user("acme", "uma").recall)).values()]
    assert sorted(e["role"] for e in mirrored) == ["assistant", "user", "user"]
    assert await redis_client.hlen(keys.user("acme", "uma").recall_vectors) == 3
