"""The gateway's own errors in each door's dialect: at the Messages door (`/v1/messages`,
`/v1/messages/count_tokens`) Anthropic's shape and field names — request limits, body too
large, invalid JSON, auth, unknown model, rate limits, unknown paths and methods — and at the
Responses door OpenAI's shape naming the Responses fields.

The real app over HTTP (uvicorn on loopback), a real store, the fake upstream; the real
`anthropic` and `openai` SDKs as clients where a client can send the request.
"""

from __future__ import annotations

from typing import Any, Iterator

import anthropic
import httpx
import openai
import pytest

from tests.support.gateway import KEYS, gateway_config, running_gateway

LIMITS = {"max_messages": 4, "max_message_chars": 100}


@pytest.fixture(scope="module")
def url(valkey_server_url: str) -> Iterator[str]:
    """Small limits: 4 messages, 100 characters, a 2 KiB body; tenant globex: 1 request per
    minute."""
    config = gateway_config(valkey_server_url, request_limits=LIMITS,
                            server={"max_body_bytes": 2048},
                            per_tenant={"globex": {"rate_limits": {"requests_per_minute": 1}}})
    with running_gateway(config) as base:
        yield base


@pytest.fixture
def client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=KEYS["acme"], max_retries=0)


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _anthropic_error(response: httpx.Response, status: int, kind: str) -> str:
    """The message of an error in Anthropic's shape (and nothing of OpenAI's)."""
    assert response.status_code == status, response.text[:300]
    body = response.json()
    assert body["type"] == "error" and set(body) == {"type", "error"}, body
    assert set(body["error"]) == {"type", "message"}, body
    assert body["error"]["type"] == kind
    return body["error"]["message"]


def _post(url: str, path: str, **kwargs: Any) -> httpx.Response:
    headers = {"x-api-key": KEYS["acme"], "anthropic-version": "2023-06-01",
               **kwargs.pop("headers", {})}
    return httpx.post(url + path, headers=headers, timeout=30, **kwargs)


PATHS = ["/v1/messages", "/v1/messages/count_tokens"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("messages, system, param", [
    ([_user("hi"), {"role": "assistant", "content": "ok"}, _user("x" * 101)], None,
     "messages.2.content"),
    ([_user("hi")], "s" * 101, "system"),
    ([{"role": "user", "content": [{"type": "text", "text": "x" * 60},
                                   {"type": "text", "text": "y" * 41}]}], None,
     "messages.0.content"),
    ([_user("weather?"),
      {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "w",
                                         "input": {}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                    "content": "r" * 101}]}], None,
     "messages.2.content.0.content"),
])
def test_a_text_over_the_limit_is_named_by_its_anthropic_field(url, path, messages, system,
                                                               param):
    body = {"model": "echo", "max_tokens": 10, "messages": messages,
            **({"system": system} if system else {})}
    message = _anthropic_error(_post(url, path, json=body), 400, "invalid_request_error")
    assert message.startswith(f"{param}: ") and "101 characters > 100 maximum" in message
    assert "Invalid '" not in message and "[" not in message  # not OpenAI's wording


def test_texts_at_the_limit_are_answered(client):
    reply = client.messages.create(model="echo", max_tokens=10, system="s" * 100, messages=[
        {"role": "user", "content": [{"type": "text", "text": "x" * 60},
                                     {"type": "text", "text": "y" * 40}]}])
    assert reply.content[0].text.startswith("x" * 60)


def test_the_sdk_gets_its_own_errors_in_anthropics_words(url, client):
    with pytest.raises(anthropic.BadRequestError) as too_long:
        client.messages.create(model="echo", max_tokens=10, messages=[_user("x" * 101)])
    assert too_long.value.body["error"]["message"].startswith("messages.0.content: ")
    with pytest.raises(anthropic.BadRequestError) as too_many:
        client.messages.create(model="echo", max_tokens=10, messages=[_user("x")] * 5)
    assert too_many.value.body["error"]["message"].startswith("messages: ")
    with pytest.raises(anthropic.NotFoundError) as unknown:
        client.messages.create(model="no-such-model", max_tokens=10, messages=[_user("x")])
    assert unknown.value.body["error"]["type"] == "not_found_error"
    assert "`no-such-model`" in unknown.value.body["error"]["message"]
    wrong = anthropic.Anthropic(base_url=url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as denied:
        wrong.messages.create(model="echo", max_tokens=10, messages=[_user("x")])
    assert denied.value.body == {"type": "error", "error": {
        "type": "authentication_error", "message": "invalid x-api-key"}}
    with pytest.raises(anthropic.AuthenticationError):
        wrong.messages.count_tokens(model="echo", messages=[_user("x")])
    limited = anthropic.Anthropic(base_url=url, api_key=KEYS["globex"], max_retries=0)
    limited.messages.create(model="echo", max_tokens=10, messages=[_user("x")])
    with pytest.raises(anthropic.RateLimitError) as rate:
        limited.messages.create(model="echo", max_tokens=10, messages=[_user("x")])
    assert rate.value.body["type"] == "error"
    assert rate.value.body["error"]["type"] == "rate_limit_error"
    assert rate.value.response.headers["retry-after"]


@pytest.mark.parametrize("path", PATHS)
def test_no_key_is_a_401_naming_x_api_key(url, path):
    response = httpx.post(url + path, json={"model": "echo", "max_tokens": 10,
                                            "messages": [_user("x")]}, timeout=30)
    assert _anthropic_error(response, 401, "authentication_error") == \
        "x-api-key header is required."


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("content, status, kind, needle", [
    (b"{not json", 400, "invalid_request_error", "not valid JSON"),
    (b"[1, 2]", 400, "invalid_request_error", "JSON object"),
    (b'{"model": "echo", "max_tokens": 10, "messages": [{"role": "user", "content": "'
     + b"x" * 3000 + b'"}]}', 413, "request_too_large", "larger than 2048 bytes"),
])
def test_bodies_the_gateway_refuses_get_anthropics_shape(url, path, content, status, kind,
                                                         needle):
    message = _anthropic_error(_post(url, path, content=content), status, kind)
    assert needle in message


@pytest.mark.parametrize("method, path, status, kind", [
    ("POST", "/v1/messages/batches", 404, "not_found_error"),
    ("GET", "/v1/messages", 405, "invalid_request_error"),
    ("DELETE", "/v1/messages/count_tokens", 405, "invalid_request_error"),
])
def test_unknown_paths_and_methods_under_messages_get_anthropics_shape(url, method, path,
                                                                      status, kind):
    response = httpx.request(method, url + path, headers={"x-api-key": KEYS["acme"]},
                             timeout=10)
    _anthropic_error(response, status, kind)


def _openai_error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text[:300]
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


@pytest.mark.parametrize("body, param", [
    ({"input": [_user("hi"), _user("x" * 101)]}, "input[1].content"),
    ({"input": "x" * 101}, "input"),
    ({"input": "hi", "instructions": "s" * 101}, "instructions"),
    ({"input": [{"role": "user", "content": [{"type": "input_text", "text": "x" * 60},
                                             {"type": "input_text", "text": "y" * 41}]}]},
     "input[0].content"),
    ({"input": [_user("weather?"),
                {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "r" * 101}]},
     "input[2].output"),
])
def test_the_responses_door_names_its_own_fields_in_openais_shape(url, body, param):
    response = httpx.post(url + "/v1/responses", json={"model": "echo", **body}, timeout=30,
                          headers={"Authorization": f"Bearer {KEYS['acme']}"})
    error = _openai_error(response, 400)
    assert (error["param"], error["code"]) == (param, "string_above_max_length")
    assert error["message"].startswith(f"Invalid '{param}': string too long.")


def test_the_openai_sdk_gets_the_responses_limit_error(url):
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEYS["acme"], max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="echo", input=[_user("hi"), _user("x" * 101)])
    assert info.value.param == "input[1].content"
    with pytest.raises(openai.BadRequestError) as many:
        client.responses.create(model="echo", input=[_user("x")] * 5)
    assert many.value.param == "input"
