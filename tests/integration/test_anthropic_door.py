"""The Anthropic Messages door end to end: the real app over HTTP, the real `anthropic` SDK
(sync, streaming, async) and LangChain's `ChatAnthropic` as clients, a real store, the fake
upstream behind (its OpenAI answers translated both ways)."""

from __future__ import annotations

import json
from typing import Iterator

import anthropic
import httpx
import openai
import pytest

from gateway.store import connect
from gateway.store.redis_store import RedisStore
from tests.support.gateway import KEYS, conversation_key, forwarded, gateway_config, \
    running_gateway

WEATHER_TOOL = {"name": "get_weather", "description": "The weather in a city.",
                "input_schema": {"type": "object",
                                 "properties": {"input": {"type": "string"}}}}


@pytest.fixture
def gateway_url(redis_url: str) -> Iterator[str]:
    models = {"tools": {"model": "fake/tool-call"}}
    with running_gateway(gateway_config(redis_url, models=models)) as url:
        yield url


@pytest.fixture(scope="module")
def litellm_imported() -> None:
    """litellm imported before a gateway with a litellm route starts: its import (seconds on a
    busy host) is a one-time cost of the process, not of the server's start-up."""
    import litellm  # noqa: F401


@pytest.fixture
def client(gateway_url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway_url, api_key=KEYS["acme"], max_retries=0)


@pytest.fixture
async def store(redis_url):
    redis = connect(redis_url)
    yield RedisStore(redis)
    await redis.aclose()


def conversation(name: str, user: str | None = None) -> dict[str, str]:
    return {"X-Conversation-Id": name, **({"X-User-Id": user} if user else {})}


def post(url: str, body: dict, path: str = "/v1/messages", **headers: str) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=30,
                      headers={"x-api-key": KEYS["acme"], "anthropic-version": "2023-06-01",
                               **headers})


def test_sdk_gets_a_message_with_text_stop_reason_and_usage(client):
    message = client.messages.create(model="echo", max_tokens=64,
                                     messages=[{"role": "user", "content": "hello there"}],
                                     extra_headers=conversation("a1"))
    assert message.type == "message" and message.role == "assistant"
    assert message.model == "echo"
    assert [(b.type, b.text) for b in message.content] == [("text", "hello there")]
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens > 0 and message.usage.output_tokens == 2


def test_system_prompt_and_blocks_reach_the_upstream_as_chat_messages(client):
    message = client.messages.create(
        model="messages", max_tokens=64, system=[{"type": "text", "text": "Be terse."}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "one"},
                                               {"type": "text", "text": "two"}]}])
    sent = forwarded(message.content[0].text)
    assert sent == [{"role": "system", "content": "Be terse."},
                    {"role": "user", "content": [{"type": "text", "text": "one"},
                                                 {"type": "text", "text": "two"}]}]


def test_sdk_stream_yields_text_and_the_final_message(client):
    with client.messages.stream(model="echo", max_tokens=64,
                                messages=[{"role": "user", "content": "stream these words"}],
                                extra_headers=conversation("s1")) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "stream these words"
    assert final.content[0].text == "stream these words"
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 3


async def test_async_sdk_answers_and_records_the_turn(gateway_url, store):
    client = anthropic.AsyncAnthropic(base_url=gateway_url, api_key=KEYS["acme"], max_retries=0)
    message = await client.messages.create(
        model="echo", max_tokens=64, messages=[{"role": "user", "content": "async hello"}],
        extra_headers=conversation("as1"))
    assert message.content[0].text == "async hello"
    stored = await store.load(conversation_key("as1"))
    assert [(s.message.role, s.message.text) for s in stored] == [
        ("user", "async hello"), ("assistant", "async hello")]


async def test_tool_use_round_trip_keeps_call_and_result_paired(client, store):
    question = {"role": "user", "content": "Paris"}
    first = client.messages.create(model="tools", max_tokens=64, tools=[WEATHER_TOOL],
                                   messages=[question], extra_headers=conversation("t1"))
    assert first.stop_reason == "tool_use"
    call = first.content[-1]
    assert (call.type, call.name, call.input) == ("tool_use", "get_weather", {"input": "Paris"})
    history = [question, {"role": "assistant", "content": [b.model_dump() for b in first.content]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                             "content": "sunny, 21 °C"}]}]
    second = client.messages.create(model="messages", max_tokens=64, tools=[WEATHER_TOOL],
                                    messages=history, extra_headers=conversation("t1"))
    # Memory may add its own system block; the conversation itself comes verbatim.
    sent = [m for m in forwarded(second.content[0].text) if m["role"] != "system"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[1]["tool_calls"][0]["id"] == call.id
    assert sent[2] == {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 °C"}
    # The resent history matched what was recorded: one branch, each message stored once.
    stored = await store.load(conversation_key("t1"))
    assert [s.message.role for s in stored] == ["user", "assistant", "tool", "assistant"]


async def test_a_breakpoint_moved_to_the_newest_message_is_no_fork(client, store):
    """Claude Code marks its newest message with `cache_control` and resends the history with
    the mark moved: the same conversation, one branch, stored without marks; the model gets the
    marks of this request only — a stateful client's history comes from the stored copies,
    which carry none."""
    mark = {"type": "ephemeral"}

    def said(text: str, marked: bool) -> dict:
        return {"role": "user", "content": [{"type": "text", "text": "<reminder>"},
                                            {"type": "text", "text": text,
                                             **({"cache_control": mark} if marked else {})}]}
    first = client.messages.create(model="messages", max_tokens=64, messages=[
        said("one", True)], extra_headers=conversation("cc1"))
    reply = {"role": "assistant", "content": first.content[0].text}
    second = client.messages.create(model="messages", max_tokens=64, messages=[
        said("one", False), reply, said("two", True)], extra_headers=conversation("cc1"))
    assert await store.branches(conversation_key("cc1")) == ()
    stored = await store.load(conversation_key("cc1"))
    assert [s.message.role for s in stored] == ["user", "assistant", "user", "assistant"]
    assert "cache_control" not in json.dumps([s.message.to_openai() for s in stored
                                              if s.message.role == "user"])
    sent = [m for m in forwarded(second.content[0].text) if m["role"] != "system"]
    assert "cache_control" not in json.dumps(sent[0]) and "cache_control" in json.dumps(sent[2])
    # Stateful: only the new message is sent; the history forwarded carries no old marks.
    third = client.messages.create(model="messages", max_tokens=64, messages=[
        said("three", True)], extra_headers=conversation("cc1"))
    sent = [m for m in forwarded(third.content[0].text) if m["role"] != "system"]
    users = [m for m in sent if m["role"] == "user"]  # the echoed replies quote old bodies
    assert [m["content"][-1]["text"] for m in users] == ["one", "two", "three"]
    assert json.dumps(users).count("cache_control") == 1 and "cache_control" in json.dumps(
        users[-1])


def test_streamed_tool_use_arrives_as_json_deltas(client):
    with client.messages.stream(model="tools", max_tokens=64, tools=[WEATHER_TOOL],
                                messages=[{"role": "user", "content": "Oslo"}]) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [(b.type, b.input) for b in final.content] == [("tool_use", {"input": "Oslo"})]


def test_event_sequence_is_anthropics(gateway_url):
    events = sse_events(post(gateway_url, {"model": "echo", "max_tokens": 64, "stream": True,
                                           "messages": [{"role": "user", "content": "abcdefgh"}]}))
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["message_start", "ping"]
    assert kinds[2] == "content_block_start" and kinds[-3:] == [
        "content_block_stop", "message_delta", "message_stop"]
    assert set(kinds[3:-3]) == {"content_block_delta"}
    start = events[0]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["input_tokens"] > 0
    assert "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta") \
        == "abcdefgh"
    assert {e["index"] for e in events if "index" in e} == {0}
    final = events[-2]
    assert final["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert final["usage"]["output_tokens"] > 0 and final["usage"]["input_tokens"] > 0


def test_tool_event_sequence_opens_a_tool_use_block(gateway_url):
    events = sse_events(post(gateway_url, {"model": "tools", "max_tokens": 64, "stream": True,
                                           "tools": [WEATHER_TOOL],
                                           "messages": [{"role": "user", "content": "Rome"}]}))
    start = next(e for e in events if e["type"] == "content_block_start")
    assert start["content_block"]["type"] == "tool_use"
    assert start["content_block"]["name"] == "get_weather"
    partial = "".join(e["delta"]["partial_json"] for e in events
                      if e["type"] == "content_block_delta")
    assert json.loads(partial) == {"input": "Rome"}
    assert events[-2]["delta"]["stop_reason"] == "tool_use"


def sse_events(response: httpx.Response) -> list[dict]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    out = []
    for block in response.text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        event = json.loads(lines["data"])
        assert lines["event"] == event["type"]
        out.append(event)
    return out


@pytest.mark.parametrize("body, param", [
    ({"model": "echo", "messages": [{"role": "user", "content": "hi"}]}, "max_tokens"),
    ({"model": "echo", "max_tokens": 10,
      "messages": [{"role": "user", "content": [{"type": "hologram", "text": "x"}]}]},
     "hologram"),
    ({"model": "echo", "max_tokens": 10,
      "messages": [{"role": "user", "content": [{"type": "tool_result",
                                                 "tool_use_id": "toolu_x", "content": "4"}]}]},
     "tool_use_id"),
    ({"model": "echo", "max_tokens": 10, "messages": []}, "messages"),
    ({"model": "echo", "max_tokens": "ten", "messages": [{"role": "user", "content": "x"}]},
     "max_tokens"),
    ({"model": "echo", "max_tokens": 10, "messages": [{"role": "robot", "content": "x"}]},
     "role"),
    ({"model": "echo", "max_tokens": 10, "messages": [
        {"role": "user", "content": "x"},
        {"role": "system", "content": [{"type": "image", "source": {}}]}]}, "messages.1.0"),
    ({"model": "echo", "max_tokens": 10, "tool_choice": {"type": "sometimes"},
      "messages": [{"role": "user", "content": "x"}]}, "tool_choice"),
])
def test_bad_input_is_a_400_in_anthropics_shape(gateway_url, body, param):
    response = post(gateway_url, body)
    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert param in error["error"]["message"]


def test_sdk_raises_its_own_errors(client, gateway_url):
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model="echo", max_tokens=10, messages=[
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope"}]}])
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="no-such-model", max_tokens=10,
                               messages=[{"role": "user", "content": "x"}])
    wrong = anthropic.Anthropic(base_url=gateway_url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        wrong.messages.create(model="echo", max_tokens=10,
                              messages=[{"role": "user", "content": "x"}])
    with pytest.raises(anthropic.RateLimitError):
        client.messages.create(model="rate-limited", max_tokens=10,
                               messages=[{"role": "user", "content": "x"}])


def test_upstream_failure_is_anthropics_error_shape_with_its_status(gateway_url):
    response = post(gateway_url, {"model": "broken", "max_tokens": 10,
                                  "messages": [{"role": "user", "content": "x"}]})
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "api_error"


def test_bearer_key_is_accepted_too(gateway_url):
    response = httpx.post(gateway_url + "/v1/messages", timeout=30,
                          headers={"Authorization": f"Bearer {KEYS['acme']}"},
                          json={"model": "echo", "max_tokens": 10,
                                "messages": [{"role": "user", "content": "bearer"}]})
    assert response.status_code == 200
    assert response.json()["content"][0]["text"] == "bearer"


def test_count_tokens_counts_the_prompt(client):
    short = client.messages.count_tokens(model="echo",
                                         messages=[{"role": "user", "content": "hi"}])
    long = client.messages.count_tokens(model="echo", system="You are a careful assistant.",
                                        messages=[{"role": "user", "content": "hi " * 50}])
    assert 0 < short.input_tokens < long.input_tokens


async def test_metadata_user_id_names_the_user(client, store):
    client.messages.create(model="echo", max_tokens=10, metadata={"user_id": "meta-user"},
                           messages=[{"role": "user", "content": "who am I"}],
                           extra_headers=conversation("m1"))
    stored = await store.load(conversation_key("m1", user="meta-user"))
    assert [s.message.text for s in stored] == ["who am I", "who am I"]


async def test_a_chat_conversation_continues_over_messages_with_the_same_history(
        gateway_url, client, store):
    chat = openai.OpenAI(base_url=gateway_url + "/v1", api_key=KEYS["acme"], max_retries=0)
    chat.chat.completions.create(model="echo", messages=[{"role": "user", "content": "one"}],
                                 extra_headers=conversation("x1", "ursula"))
    # A stateful client: only the new message; the gateway brings the rest.
    message = client.messages.create(model="messages", max_tokens=64,
                                     messages=[{"role": "user", "content": "two"}],
                                     extra_headers=conversation("x1", "ursula"))
    assert forwarded(message.content[0].text) == [
        {"role": "user", "content": "one"}, {"role": "assistant", "content": "one"},
        {"role": "user", "content": "two"}]
    stored = await store.load(conversation_key("x1", user="ursula"))
    assert [s.message.text for s in stored][:3] == ["one", "one", "two"]


def test_a_users_memory_spans_both_doors(gateway_url, client):
    chat = openai.OpenAI(base_url=gateway_url + "/v1", api_key=KEYS["acme"], max_retries=0)
    chat.chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "my cat is named Quixote"}],
        extra_headers=conversation("c-chat", "ursula"))
    message = client.messages.create(
        model="messages", max_tokens=64,
        messages=[{"role": "user", "content": "What is my cat called?"}],
        extra_headers={**conversation("c-anthropic", "ursula"), "X-Gateway-Persist": "false"})
    assert "Quixote" in message.content[0].text
    other = client.messages.create(
        model="messages", max_tokens=64,
        messages=[{"role": "user", "content": "What is my cat called?"}],
        extra_headers={**conversation("c-anthropic", "victor"), "X-Gateway-Persist": "false"})
    assert "Quixote" not in other.content[0].text


def test_langchain_chat_anthropic_through_the_gateway(gateway_url):
    from langchain_anthropic import ChatAnthropic

    model = ChatAnthropic(model="echo", base_url=gateway_url, api_key=KEYS["acme"],
                          max_tokens=64, max_retries=0,
                          default_headers=conversation("lc1"))
    assert model.invoke("hello from langchain").content == "hello from langchain"
    assert "".join(str(c.content) for c in model.stream("streamed words")) == "streamed words"


ANTHROPIC_ANSWER = {"id": "msg_up", "type": "message", "role": "assistant",
                    "model": "claude-sonnet-4-5", "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "content": [{"type": "thinking", "thinking": "It said sunny.",
                                 "signature": "sig-2"},
                                {"type": "text", "text": "Sunny."}],
                    "usage": {"input_tokens": 20, "output_tokens": 3}}


async def test_an_anthropic_route_goes_through_litellm_with_blocks_intact(redis_url,
                                                                         monkeypatch,
                                                                         litellm_imported):
    """Anthropic client → gateway → litellm → an Anthropic upstream (mocked at its HTTP edge):
    the system prompt, the thinking block with its signature and the tool_use/tool_result pair
    arrive as Anthropic blocks again, the answer comes back with its thinking, and the history
    resent with that answer is the stored one (no branch)."""
    import respx

    monkeypatch.setenv("ANTHROPIC_TEST_KEY", "sk-ant-test")
    # litellm_params keep the route on litellm (the Messages door's requests to an
    # `anthropic/` route otherwise go direct: tests/integration/test_anthropic_passthrough.py)
    models = {"claude": {"model": "anthropic/claude-sonnet-4-5",
                         "api_base": "http://anthropic.test", "api_key_env": "ANTHROPIC_TEST_KEY",
                         "litellm_params": {"max_retries": 0}}}
    history = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Use the tool.", "signature": "sig-1"},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
             "input": {"input": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": "sunny"}]}]
    with respx.mock(assert_all_called=False) as mock, \
            running_gateway(gateway_config(redis_url, models=models)) as url:
        route = mock.post("http://anthropic.test/v1/messages").respond(json=ANTHROPIC_ANSWER)
        mock.route(host="127.0.0.1").pass_through()
        client = anthropic.Anthropic(base_url=url, api_key=KEYS["acme"], max_retries=0)
        message = client.messages.create(model="claude", max_tokens=100, system="Be brief.",
                                         tools=[WEATHER_TOOL], messages=history,
                                         extra_headers=conversation("claude-1"))
        sent = json.loads(route.calls.last.request.content)
        resent = [*history, {"role": "assistant",
                             "content": [b.model_dump() for b in message.content]},
                  {"role": "user", "content": "Thanks!"}]
        client.messages.create(model="claude", max_tokens=100, system="Be brief.",
                               tools=[WEATHER_TOOL], messages=resent,
                               extra_headers=conversation("claude-1"))
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].signature == "sig-2"
    assert message.content[1].text == "Sunny." and message.usage.output_tokens == 3
    redis = connect(redis_url)
    try:
        store = RedisStore(redis)
        stored = await store.load(conversation_key("claude-1"))
        assert [s.message.role for s in stored] == [
            "user", "assistant", "tool", "assistant", "user", "assistant"]
        assert await store.branches(conversation_key("claude-1")) == ()
    finally:
        await redis.aclose()
    assert sent["model"] == "claude-sonnet-4-5" and sent["max_tokens"] == 100
    assert "Be brief." in json.dumps(sent["system"])
    assistant = next(m for m in sent["messages"] if m["role"] == "assistant")
    assert {"type": "thinking", "thinking": "Use the tool.", "signature": "sig-1"} in \
        assistant["content"]
    use = next(b for b in assistant["content"] if b["type"] == "tool_use")
    assert (use["id"], use["input"]) == ("toolu_1", {"input": "Paris"})
    result = next(b for m in sent["messages"] if m["role"] == "user"
                  for b in (m["content"] if isinstance(m["content"], list) else [])
                  if b.get("type") == "tool_result")
    assert result["tool_use_id"] == "toolu_1"
    assert [t["name"] for t in sent["tools"]] == ["get_weather"]


@pytest.mark.parametrize("path", ["direct", "litellm"])
def test_an_openai_compatible_server_behind_the_messages_door(redis_url, monkeypatch, path,
                                                              litellm_imported):
    """The fake upstream's own server over loopback HTTP, reached by the direct client and by
    litellm (any litellm_params keep a route on litellm): the same answers, streamed too."""
    from gateway.upstream.fake_server import create_fake_app
    from tests.support.servers import serve

    monkeypatch.setenv("FAKE_SERVER_KEY", "sk-fake")
    forced = {"litellm_params": {"max_retries": 0}} if path == "litellm" else {}
    with serve(create_fake_app()) as fake:
        models = {name: {"model": f"openai/{name}", "api_base": fake + "/v1",
                         "api_key_env": "FAKE_SERVER_KEY", **forced}
                  for name in ("echo", "tool-call")}
        with running_gateway(gateway_config(redis_url, models=models)) as url:
            client = anthropic.Anthropic(base_url=url, api_key=KEYS["acme"], max_retries=0)
            message = client.messages.create(model="echo", max_tokens=64,
                                             messages=[{"role": "user", "content": "over http"}])
            with client.messages.stream(model="tool-call", max_tokens=64, tools=[WEATHER_TOOL],
                                        messages=[{"role": "user", "content": "Lima"}]) as s:
                final = s.get_final_message()
    assert message.content[0].text == "over http" and message.usage.output_tokens > 0
    assert final.stop_reason == "tool_use" and final.content[0].input == {"input": "Lima"}
    assert final.usage.output_tokens > 0


async def test_one_shot_and_pin_markers_work_through_the_messages_door(gateway_url, store):
    client = anthropic.Anthropic(base_url=gateway_url, api_key=KEYS["acme"], max_retries=0)
    secret = "the launch code is 0000 " * 5
    message = client.messages.create(
        model="messages", max_tokens=64, extra_headers=conversation("marks"),
        messages=[{"role": "user", "content": secret, "x_gateway_one_shot": True}])
    assert secret in message.content[0].text  # forwarded in full this once
    stored = await store.load(conversation_key("marks"))
    assert secret not in stored[0].message.text and "one-shot" in stored[0].message.text


def test_an_upstream_refusing_a_stream_is_an_http_error_in_anthropics_shape(client, gateway_url):
    with pytest.raises(anthropic.RateLimitError):
        with client.messages.stream(model="rate-limited", max_tokens=10,
                                    messages=[{"role": "user", "content": "x"}]) as stream:
            list(stream)
    response = post(gateway_url, {"model": "broken", "max_tokens": 10, "stream": True,
                                  "messages": [{"role": "user", "content": "x"}]})
    assert response.status_code == 500
    assert response.json() == {"type": "error", "error": {
        "type": "api_error", "message": response.json()["error"]["message"]}}


def test_the_stop_sequence_that_ended_a_reply_is_named(client):
    """The fake names the sequence it stopped at (`stop_reason` in the choice, as vLLM does):
    the client gets `stop_sequence` and that sequence, streamed or not."""
    asked = {"model": "echo", "max_tokens": 32, "stop_sequences": ["never", " END"],
             "messages": [{"role": "user", "content": "say this END and not that"}]}
    message = client.messages.create(**asked)
    assert message.content[0].text == "say this"
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", " END")
    with client.messages.stream(**asked) as stream:
        final = stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", " END")
    plain = client.messages.create(**{**asked, "stop_sequences": ["never"]})
    assert (plain.stop_reason, plain.stop_sequence) == ("end_turn", None)


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_a_method_the_door_does_not_serve_is_a_405_in_anthropics_shape(gateway_url, path):
    # Found by schemathesis (TRACE /v1/messages): the 405 was in OpenAI's shape.
    response = httpx.request("PUT", gateway_url + path, headers={"x-api-key": KEYS["acme"]},
                             timeout=10)
    assert response.status_code == 405 and response.headers["allow"] == "POST"
    body = response.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
