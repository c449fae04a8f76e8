"""The OpenAI Responses door end to end: the real app over HTTP, the real `openai` SDK's
`client.responses`, a real store, the fake upstream behind (its chat answers translated)."""

from __future__ import annotations

import json
from typing import Iterator

import httpx
import openai
import pytest

from gateway.store import connect
from gateway.store.redis_store import RedisStore
from tests.support.gateway import KEYS, conversation_key, forwarded, gateway_config, \
    running_gateway

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"input": {"type": "string"}}}}


@pytest.fixture
def gateway_url(redis_url: str) -> Iterator[str]:
    models = {"tools": {"model": "fake/tool-call"}}
    with running_gateway(gateway_config(redis_url, models=models)) as url:
        yield url


@pytest.fixture
def client(gateway_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway_url + "/v1", api_key=KEYS["acme"], max_retries=0)


@pytest.fixture
async def store(redis_url):
    redis = connect(redis_url)
    yield RedisStore(redis)
    await redis.aclose()


def turns(reply_text: str) -> list[dict]:
    """The conversation the upstream saw, without system messages (memory's blocks)."""
    return [m for m in forwarded(reply_text) if m["role"] != "system"]


def test_plain_input_gets_a_completed_response(client):
    response = client.responses.create(model="echo", input="hello there")
    assert response.object == "response" and response.status == "completed"
    assert response.id.startswith("resp_") and response.model == "echo"
    assert response.output_text == "hello there"
    assert response.output[0].type == "message" and response.output[0].role == "assistant"
    assert response.usage.input_tokens > 0 and response.usage.output_tokens == 2
    assert response.usage.total_tokens == response.usage.input_tokens + 2


def test_instructions_and_items_reach_the_upstream_as_chat_messages(client):
    response = client.responses.create(
        model="messages", instructions="Be terse.",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "one"}]}])
    assert forwarded(response.output_text) == [{"role": "system", "content": "Be terse."},
                                               {"role": "user", "content": "one"}]


def test_previous_response_id_continues_the_chain_over_five_turns(client):
    previous = None
    for turn in range(1, 6):
        response = client.responses.create(model="messages", input=f"turn {turn}",
                                           previous_response_id=previous)
        seen = turns(response.output_text)
        assert [m["content"] for m in seen if m["role"] == "user"] == \
            [f"turn {n}" for n in range(1, turn + 1)]
        assert len(seen) == 2 * turn - 1  # every earlier turn with its reply, then this one
        assert response.previous_response_id == previous
        previous = response.id


def test_instructions_are_not_carried_along_the_chain(client):
    first = client.responses.create(model="echo", input="hi", instructions="Speak French.")
    second = client.responses.create(model="messages", input="again",
                                     previous_response_id=first.id)
    assert "Speak French." not in second.output_text


def test_streaming_yields_the_responses_event_sequence(client):
    events = list(client.responses.create(model="echo", input="stream these words",
                                          stream=True))
    kinds = [e.type for e in events]
    assert kinds == ["response.created", "response.in_progress",
                     "response.output_item.added", "response.content_part.added",
                     *["response.output_text.delta"] * (len(kinds) - 8),
                     "response.output_text.done", "response.content_part.done",
                     "response.output_item.done", "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == \
        "stream these words"
    final = events[-1].response
    assert final.status == "completed" and final.output_text == "stream these words"
    assert final.usage.output_tokens > 0 and final.usage.input_tokens > 0


def test_sdk_stream_helper_assembles_the_final_response(client):
    with client.responses.stream(model="echo", input="helper words") as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert text == "helper words" and final.output_text == "helper words"


def test_a_streamed_response_continues_the_chain(client):
    events = list(client.responses.create(model="echo", input="first", stream=True))
    first = events[-1].response
    second = client.responses.create(model="messages", input="second",
                                     previous_response_id=first.id)
    assert [m["content"] for m in turns(second.output_text)] == ["first", "first", "second"]


def test_function_call_and_its_output_round_trip(client):
    first = client.responses.create(model="tools", input="Paris", tools=[WEATHER])
    call = first.output[-1]
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"input": "Paris"}
    second = client.responses.create(
        model="messages", previous_response_id=first.id, tools=[WEATHER],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])
    seen = turns(second.output_text)
    assert [m["role"] for m in seen] == ["user", "assistant", "tool"]
    assert seen[1]["tool_calls"][0]["id"] == call.call_id
    assert seen[2] == {"role": "tool", "tool_call_id": call.call_id, "content": "sunny"}


def test_streamed_function_call_arrives_as_argument_deltas(client):
    events = list(client.responses.create(model="tools", input="Oslo", tools=[WEATHER],
                                          stream=True))
    assert "response.function_call_arguments.delta" in {e.type for e in events}
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert json.loads(done.arguments) == {"input": "Oslo"}
    assert events[-1].response.output[0].call_id == done.item_id.removeprefix("fc_")


def test_get_returns_the_stored_response(client):
    created = client.responses.create(model="echo", input="keep me")
    fetched = client.responses.retrieve(created.id)
    assert fetched.id == created.id and fetched.output_text == "keep me"


async def test_store_false_keeps_neither_the_turn_nor_the_response(client, store):
    response = client.responses.create(model="echo", input="forget me", store=False,
                                       extra_headers={"X-Conversation-Id": "nostore"})
    assert response.output_text == "forget me" and response.store is False
    assert await store.load(conversation_key("nostore")) == ()
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="echo", input="x", previous_response_id=response.id)


async def test_a_chain_is_a_conversation_that_the_chat_door_continues(gateway_url, client,
                                                                      store):
    first = client.responses.create(model="echo", input="one",
                                    extra_headers={"X-Conversation-Id": "shared"})
    client.responses.create(model="echo", input="two", previous_response_id=first.id)
    stored = await store.load(conversation_key("shared"))
    assert [s.message.text for s in stored] == ["one", "one", "two", "two"]
    chat = openai.OpenAI(base_url=gateway_url + "/v1", api_key=KEYS["acme"], max_retries=0)
    reply = chat.chat.completions.create(
        model="messages", messages=[{"role": "user", "content": "three"}],
        extra_headers={"X-Conversation-Id": "shared"})
    assert [m["content"] for m in turns(reply.choices[0].message.content)] == \
        ["one", "one", "two", "two", "three"]


def test_unknown_or_another_tenants_previous_id_is_not_found(client, gateway_url):
    with pytest.raises(openai.NotFoundError) as raised:
        client.responses.create(model="echo", input="x", previous_response_id="resp_nope")
    assert raised.value.body["code"] == "previous_response_not_found"
    theirs = openai.OpenAI(base_url=gateway_url + "/v1", api_key=KEYS["globex"],
                           max_retries=0).responses.create(model="echo", input="secret")
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="echo", input="x", previous_response_id=theirs.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(theirs.id)


def test_another_users_previous_id_is_not_found(client):
    mine = client.responses.create(model="echo", input="mine",
                                   extra_headers={"X-User-Id": "ursula"})
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="echo", input="x", previous_response_id=mine.id,
                                extra_headers={"X-User-Id": "victor"})


def test_a_named_users_chain_is_not_reached_without_naming_the_user(client):
    canary = "canary-ursula-7Q"
    mine = client.responses.create(model="echo", input=canary,
                                   extra_headers={"X-User-Id": "ursula"})
    with pytest.raises(openai.NotFoundError):  # no user named: the anonymous user
        client.responses.retrieve(mine.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="echo", input="x", previous_response_id=mine.id)
    with pytest.raises(openai.NotFoundError):  # and the anonymous user's chain is not hers
        anonymous = client.responses.create(model="echo", input="x")
        client.responses.retrieve(anonymous.id, extra_headers={"X-User-Id": "ursula"})
    own = client.responses.retrieve(mine.id, extra_headers={"X-User-Id": "ursula"})
    assert canary in own.output_text


def test_continuing_from_an_older_response_is_refused_clearly(client):
    first = client.responses.create(model="echo", input="a")
    client.responses.create(model="echo", input="b", previous_response_id=first.id)
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model="echo", input="c", previous_response_id=first.id)
    assert raised.value.body["code"] == "previous_response_not_latest"


@pytest.mark.parametrize("body, param", [
    ({"model": "echo"}, "input"),
    ({"model": "echo", "input": []}, "input"),
    ({"model": "echo", "input": [{"type": "function_call_output", "call_id": "c9",
                                  "output": "4"}]}, "input"),
    ({"model": "echo", "input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"model": "echo", "input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
    ({"model": "echo", "input": "x", "background": True}, "background"),
    ({"model": "echo", "input": "x", "frobnicate": 1}, "frobnicate"),
    ({"model": "echo", "input": "x", "store": "no"}, "store"),
])
def test_bad_input_is_a_400_in_openais_shape(gateway_url, body, param):
    response = httpx.post(gateway_url + "/v1/responses", json=body, timeout=30,
                          headers={"Authorization": f"Bearer {KEYS['acme']}"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["param"] == param


def test_an_upstream_error_keeps_its_status_streaming_or_not(client):
    with pytest.raises(openai.RateLimitError):
        client.responses.create(model="rate-limited", input="x")
    with pytest.raises(openai.RateLimitError):
        list(client.responses.create(model="rate-limited", input="x", stream=True))
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model", input="x")


@pytest.mark.parametrize("forget", ["conversation", "user"])
async def test_a_deleted_conversation_or_erased_user_leaves_no_response_id_behind(
        gateway_url, client, store, forget):
    headers = {"X-User-Id": "wanda", "X-Conversation-Id": "to-forget"}
    first = client.responses.create(model="echo", input="one", extra_headers=headers)
    second = client.responses.create(model="echo", input="two", previous_response_id=first.id,
                                     extra_headers={"X-User-Id": "wanda"})
    owners = [store.keys.response_owner("acme", r.id) for r in (first, second)]
    assert await store.client.exists(*owners) == 2
    path = "/v1/memory/conversations/to-forget" if forget == "conversation" else "/v1/memory"
    answer = httpx.delete(gateway_url + path, headers={
        "Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": "wanda"}, timeout=60)
    assert answer.status_code == 200, answer.text
    assert await store.client.exists(*owners) == 0
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(second.id, extra_headers={"X-User-Id": "wanda"})
