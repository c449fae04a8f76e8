"""The fake upstream's Anthropic Messages form (`/v1/messages` of the fake server), as the real
`anthropic` SDK and raw HTTP see it; and a gateway route whose provider is Anthropic served by
it end to end, offline: the Messages door over the direct pass-through, the chat door through
litellm's Anthropic provider with its api_base at the fake."""

from __future__ import annotations

import json
from typing import Iterator

import anthropic
import httpx
import openai
import pytest

from gateway.upstream.fake_messages import signature
from gateway.upstream.fake_server import create_fake_app
from tests.support.gateway import KEYS, conversation_key, forwarded, gateway_config, \
    running_gateway
from tests.support.servers import serve

TOOL = {"name": "get_weather", "input_schema": {"type": "object"}}
ASKED = [{"role": "user", "content": "Where is the station?"},
         {"role": "assistant", "content": "Straight on."},
         {"role": "user", "content": [{"type": "text", "text": "And then "},
                                      {"type": "text", "text": "left?"}]}]


@pytest.fixture(scope="module")
def fake_url() -> Iterator[str]:
    with serve(create_fake_app()) as url:
        yield url


@pytest.fixture(scope="module")
def sdk(fake_url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=fake_url, api_key="sk-ant-fake", max_retries=0)


def test_echo_is_a_messages_answer_with_usage(sdk):
    message = sdk.messages.create(model="echo", max_tokens=32, messages=ASKED)
    assert (message.type, message.role, message.model) == ("message", "assistant", "fake/echo")
    assert [(b.type, b.text) for b in message.content] == [("text", "And then left?")]
    assert (message.stop_reason, message.stop_sequence) == ("end_turn", None)
    assert message.usage.input_tokens > message.usage.output_tokens > 0


def test_echo_messages_returns_the_system_prompt_and_messages_received(sdk):
    system = [{"type": "text", "text": "Be brief."}]
    message = sdk.messages.create(model="echo-messages", max_tokens=32, system=system,
                                  messages=ASKED)
    assert json.loads(message.content[0].text) == [{"role": "system", "content": system},
                                                    *ASKED]


def test_a_stop_sequence_cuts_the_echo_and_is_named(sdk):
    message = sdk.messages.create(model="echo", max_tokens=32, messages=ASKED,
                                  stop_sequences=["zzz", " left", "then"])
    assert message.content[0].text == "And "
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "then")


def test_stream_is_anthropics_event_sequence(fake_url):
    body = {"model": "cached-4", "max_tokens": 32, "messages": ASKED, "stream": True}
    with httpx.stream("POST", fake_url + "/v1/messages", json=body) as response:
        raw = response.read().decode()
    events = [e for e in raw.split("\n\n") if e]
    named = [e.split("\n")[0].removeprefix("event: ") for e in events]
    data = [json.loads(e.split("\n")[1].removeprefix("data: ")) for e in events]
    assert [d["type"] for d in data] == named
    assert named[:3] == ["message_start", "content_block_start", "ping"]
    assert set(named[3:-3]) == {"content_block_delta"}
    assert named[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert "".join(d["delta"]["text"] for d in data[3:-3]) == "And then left?"
    assert data[-2]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert data[0]["message"]["usage"]["cache_read_input_tokens"] == 4


def test_sdk_streams_a_tool_call(sdk):
    with sdk.messages.stream(model="tool-call", max_tokens=32, tools=[TOOL],
                             messages=ASKED) as stream:
        final = stream.get_final_message()
    (call,) = final.content
    assert (call.type, call.name, call.input) == ("tool_use", "get_weather",
                                                  {"input": "And then left?"})
    assert final.stop_reason == "tool_use" and final.usage.output_tokens > 0


def test_errors_and_bad_bodies_in_anthropics_shape(sdk, fake_url):
    with pytest.raises(anthropic.RateLimitError) as caught:
        sdk.messages.create(model="error-429", max_tokens=32, messages=ASKED)
    assert caught.value.body["error"]["type"] == "rate_limit_error"
    for bad in ({"model": "echo", "messages": ASKED},  # no max_tokens
                {"model": "echo", "max_tokens": 5, "messages": [{"role": "tool"}]},
                {"model": "echo", "max_tokens": 5, "messages": ASKED, "stop_sequences": "x"},
                [1, 2]):
        response = httpx.post(fake_url + "/v1/messages", json=bad)
        assert response.status_code == 400
        assert response.json()["error"]["type"] == "invalid_request_error"


# --- a gateway route whose provider is Anthropic, served by the fake -------------------------

@pytest.fixture
def claude_gateway(fake_url: str, redis_url: str, monkeypatch) -> Iterator[str]:
    import litellm  # noqa: F401 — its import is the process's cost, not the server start's

    monkeypatch.setenv("FAKE_ANTHROPIC_KEY", "sk-ant-fake")
    models = {name: {"model": f"anthropic/{behaviour}", "api_base": fake_url,
                     "api_key_env": "FAKE_ANTHROPIC_KEY"}
              for name, behaviour in (("claude", "echo"), ("claude-sees", "echo-messages"),
                                      ("claude-tools", "tool-call"), ("claude-busy", "error-429"))}
    with running_gateway(gateway_config(redis_url, models=models)) as url:
        yield url


async def test_an_anthropic_route_answers_every_door_offline(claude_gateway, redis_url):
    client = anthropic.Anthropic(base_url=claude_gateway, api_key=KEYS["acme"], max_retries=0)
    headers = {"X-Conversation-Id": "fake-claude"}
    message = client.messages.create(model="claude", max_tokens=32, extra_headers=headers,
                                     messages=[{"role": "user", "content": "hello claude"}])
    assert message.content[0].text == "hello claude" and message.stop_reason == "end_turn"
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
    with client.messages.stream(model="claude-tools", max_tokens=32, tools=[TOOL],
                                messages=[{"role": "user", "content": "Lima"}]) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use" and final.content[-1].input == {"input": "Lima"}
    with pytest.raises(anthropic.RateLimitError) as caught:  # the upstream's error, its shape
        client.messages.create(model="claude-busy", max_tokens=32,
                               messages=[{"role": "user", "content": "x"}])
    assert caught.value.body["error"] == {
        "type": "rate_limit_error",
        "message": "The fake upstream (error-429) failed with HTTP 429, as asked."}

    chat = openai.OpenAI(base_url=claude_gateway + "/v1", api_key=KEYS["acme"], max_retries=0)
    answer = chat.chat.completions.create(
        model="claude", extra_headers=headers,
        messages=[{"role": "user", "content": "hello claude"},
                  {"role": "assistant", "content": "hello claude"},
                  {"role": "user", "content": "from the chat door"}])
    assert answer.choices[0].message.content == "from the chat door"

    from gateway.store import connect
    from gateway.store.redis_store import RedisStore

    redis = connect(redis_url)
    try:
        stored = await RedisStore(redis).load(conversation_key("fake-claude"))
    finally:
        await redis.aclose()
    assert [s.message.text for s in stored] == ["hello claude", "hello claude",
                                                "from the chat door", "from the chat door"]


def test_the_anthropic_upstream_gets_the_rewritten_conversation_as_blocks(claude_gateway):
    client = anthropic.Anthropic(base_url=claude_gateway, api_key=KEYS["acme"], max_retries=0)
    message = client.messages.create(model="claude-sees", max_tokens=32, system="Be brief.",
                                     messages=[{"role": "user", "content": "what was sent?"}])
    sent = forwarded(message.content[0].text)
    assert sent[0]["role"] == "system" and "Be brief." in json.dumps(sent[0]["content"])
    assert sent[-1]["role"] == "user" and "what was sent?" in json.dumps(sent[-1]["content"])


# --- the providers' rules, the agent behaviour, the requests kept ----------------------------

THINK = {"type": "enabled", "budget_tokens": 1024}
TASK = {"role": "user", "content": "Find the weather in Lima."}


def call(id_: str, *before: dict) -> dict:
    return {"role": "assistant", "content": [
        *before, {"type": "tool_use", "id": id_, "name": "get_weather", "input": {}}]}


def answer(id_: str) -> dict:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id_,
                                         "content": "sunny"}]}


@pytest.mark.parametrize("model, messages, extra, expected", [
    ("echo", [call("t1"), answer("t1")], {},
     'messages.0.role: first message must use the "user" role'),
    ("echo", [TASK, call("t1", {"type": "thinking", "thinking": "Hm.", "signature": "sig-1"}),
              answer("t1")], {}, "messages.1.content.0: Invalid `signature` in `thinking` block"),
    ("agent", [TASK, call("t1"), answer("t1")], {"thinking": THINK},
     "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
     "`tool_use`."),
    ("echo", [TASK, call("t1"), {"role": "user", "content": "and?"}], {},
     "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: "
     "t1."),
    ("echo", [{"role": "user", "content": [
        {"type": "text", "text": f"part {n}", "cache_control": {"type": "ephemeral"}}
        for n in range(5)]}], {},
     "A maximum of 4 blocks with cache_control may be provided. Found 5."),
    ("echo-ctx10", [{"role": "user", "content": "a few more words than ten tokens can hold, "
                                                "surely more than ten"}], {},
     "prompt is too long: "),
])
def test_a_request_anthropic_rejects_is_its_400_in_its_words(sdk, fake_url, model, messages,
                                                             extra, expected):
    with pytest.raises(anthropic.BadRequestError) as caught:
        sdk.messages.create(model=model, max_tokens=32, messages=messages, tools=[TOOL],
                            **extra)
    assert caught.value.status_code == 400
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert caught.value.body["error"]["message"].startswith(expected)
    stream = httpx.post(fake_url + "/v1/messages", json={
        "model": model, "max_tokens": 32, "messages": messages, "tools": [TOOL], "stream": True,
        **extra})
    assert stream.status_code == 400  # a stream is refused before it starts


def test_agent_calls_the_first_tool_each_step_thinking_first_with_a_valid_signature(sdk):
    first = sdk.messages.create(model="agent", max_tokens=2048, tools=[TOOL], thinking=THINK,
                                messages=[TASK])
    thought, use = first.content
    assert (thought.type, use.type, first.stop_reason) == ("thinking", "tool_use", "tool_use")
    assert thought.signature == signature(thought.thinking) and thought.thinking
    assert (use.name, use.input) == ("get_weather", {"step": 1})

    loop = [TASK, {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                          "content": "sunny"},
                                         {"type": "text", "text": "<reminder>Be brief."}]}]
    with sdk.messages.stream(model="agent", max_tokens=2048, tools=[TOOL], thinking=THINK,
                             messages=loop) as stream:
        second = stream.get_final_message()
    assert [b.type for b in second.content] == ["thinking", "tool_use"]
    assert second.content[0].signature == signature(second.content[0].thinking)
    assert second.content[1].input == {"step": 3} and second.content[1].id != use.id
    again = sdk.messages.create(model="agent", max_tokens=2048, tools=[TOOL], thinking=THINK,
                                messages=loop)
    assert again.content[1].id == second.content[1].id  # ids derive from the messages

    plain = sdk.messages.create(model="agent", max_tokens=32, tools=[TOOL], messages=[TASK])
    assert [(b.type, b.input) for b in plain.content] == [("tool_use", {"step": 1})]
    echoed = sdk.messages.create(model="agent", max_tokens=32, messages=[TASK])
    assert echoed.content[0].text == TASK["content"] and echoed.stop_reason == "end_turn"


def test_agent_streams_thinking_then_signature_then_the_tool_call(fake_url):
    body = {"model": "agent", "max_tokens": 2048, "tools": [TOOL], "thinking": THINK,
            "messages": [TASK], "stream": True}
    with httpx.stream("POST", fake_url + "/v1/messages", json=body) as response:
        data = [json.loads(e.split("\n")[1].removeprefix("data: "))
                for e in response.read().decode().split("\n\n") if e]
    deltas = [d["delta"]["type"] for d in data if d["type"] == "content_block_delta"]
    assert deltas[0] == "thinking_delta" and "signature_delta" in deltas
    assert deltas.index("signature_delta") < deltas.index("input_json_delta")
    starts = [d["content_block"]["type"] for d in data if d["type"] == "content_block_start"]
    assert starts == ["thinking", "tool_use"]


def test_the_server_keeps_the_requests_it_received_rejected_ones_with_their_status(fake_url):
    assert httpx.delete(fake_url + "/fake/received").json() == {"requests": []}
    good = {"model": "echo", "max_tokens": 8, "messages": [TASK]}
    bad = {"model": "echo", "max_tokens": 8, "messages": [call("t1")]}
    chat = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(fake_url + "/v1/messages", json=good).status_code == 200
    assert httpx.post(fake_url + "/v1/messages", json=bad).status_code == 400
    assert httpx.post(fake_url + "/v1/chat/completions", json=chat).status_code == 200
    assert httpx.get(fake_url + "/fake/received").json() == {"requests": [
        {"path": "/v1/messages", "body": good},
        {"path": "/v1/messages", "body": bad, "status": 400},
        {"path": "/v1/chat/completions", "body": chat}]}
    httpx.delete(fake_url + "/fake/received")
    assert httpx.get(fake_url + "/fake/received").json() == {"requests": []}
