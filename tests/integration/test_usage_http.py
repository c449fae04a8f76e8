"""Usage and spend end to end: the real gateway over HTTP, a real store, the recorder; the
upstream answered at its HTTP edge with known `usage` (cached tokens included), so counters are
checked to the token and spend to the price table. Also: the stream usage asked for by the
gateway never reaches a client that did not ask, and tenants' and users' counters stay apart
(canaries). And the provider cache hints as the upstream receives them."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import anthropic
import httpx
import openai
import pytest
import respx

from gateway.core.context.blocks import RECALLED_HEADER
from tests.support.gateway import KEYS, gateway_config, running_gateway
from tests.support.http_edge import http_edge

PROMPT, CACHED, COMPLETION = 1500, 1280, 40
USAGE = {"prompt_tokens": PROMPT, "completion_tokens": COMPLETION,
         "total_tokens": PROMPT + COMPLETION, "prompt_tokens_details": {"cached_tokens": CACHED}}
# Per million tokens, and the same in nano-units per token (×1000).
PRICE = {"input": 2.5, "cached_input": 1.25, "output": 10}
NANO_INPUT, NANO_CACHED, NANO_OUTPUT = 2500, 1250, 10_000
ONE_REQUEST_NANO = (PROMPT - CACHED) * NANO_INPUT + CACHED * NANO_CACHED \
    + COMPLETION * NANO_OUTPUT


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    data = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            **extra}
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


def sse(include_usage: bool) -> bytes:
    """An OpenAI stream as OpenAI writes it: with usage asked for, `"usage":null` in every
    chunk and a last chunk with the usage and no choices."""
    extra = {"usage": None} if include_usage else {}
    body = _chunk({"role": "assistant", "content": ""}, **extra) \
        + _chunk({"content": "Hi"}, **extra) + _chunk({}, "stop", **extra)
    if include_usage:
        body += b"data: " + json.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk",
                                         "created": 1, "model": "m", "choices": [],
                                         "usage": USAGE}, separators=(",", ":")).encode() \
            + b"\n\n"
    return body + b"data: [DONE]\n\n"


class Upstream:
    """An OpenAI-compatible upstream at the HTTP edge; keeps every body it was sent."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def answer(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        if body.get("stream"):
            asked = bool((body.get("stream_options") or {}).get("include_usage"))
            return httpx.Response(200, content=sse(asked),
                                  headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json={
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"},
                         "logprobs": None, "finish_reason": "stop"}], "usage": USAGE})


@pytest.fixture
def upstream():
    with http_edge() as edge:
        edge.router = respx.MockRouter(assert_all_called=False)
        answers = Upstream()
        edge.router.post(edge.url + "/v1/chat/completions").mock(side_effect=answers.answer)
        answers.url = edge.url + "/v1"  # type: ignore[attr-defined]
        yield answers


@pytest.fixture
def gateway_url(redis_url, upstream):
    models = {"m": {"model": "openai/m", "api_base": upstream.url, "price": PRICE},
              "hinted": {"model": "openai/m", "api_base": upstream.url, "cache_hints": True},
              "strict": {"model": "openai/m", "api_base": upstream.url, "stream_usage": False},
              "unpriced": {"model": "openai/no-such-model", "api_base": upstream.url},
              "fake-cached": {"model": "fake/cached-8", "price": PRICE}}
    with running_gateway(gateway_config(redis_url, models=models)) as url:
        yield url


def ids(conversation: str, user: str) -> dict[str, str]:
    return {"X-Conversation-Id": conversation, "X-User-Id": user}


def chat(url: str, headers: dict[str, str], *, key: str = KEYS["acme"], model: str = "m",
         messages: list[dict[str, Any]] | None = None, **body: Any) -> httpx.Response:
    response = httpx.post(url + "/v1/chat/completions", timeout=30,
                          headers={"Authorization": f"Bearer {key}", **headers},
                          json={"model": model, "messages": messages or [
                              {"role": "user", "content": "Hello"}], **body})
    assert response.status_code == 200, response.text
    return response


def usage_of(url: str, user: str, conversation: str | None = None, *,
             key: str = KEYS["acme"], requests: int | None = None) -> dict[str, Any]:
    """The memory API's usage answer (waiting, bounded, until `requests` are counted: a
    stream's turn is recorded after its last byte)."""
    path = f"/v1/memory/conversations/{conversation}/usage" if conversation else "/v1/memory/usage"
    deadline = time.monotonic() + 10
    while True:
        answer = httpx.get(url + path, headers={"Authorization": f"Bearer {key}",
                                                "X-User-Id": user}, timeout=10)
        assert answer.status_code == 200, answer.text
        data = answer.json()
        if requests is None or data["requests"] >= requests or time.monotonic() > deadline:
            return data
        time.sleep(0.05)


def test_counters_are_exact_to_the_token_and_spend_to_the_price_table(gateway_url):
    headers = ids("exact-1", "u-exact")
    chat(gateway_url, headers)
    chat(gateway_url, headers)
    stream = chat(gateway_url, headers, stream=True)
    asked = chat(gateway_url, headers, stream=True, stream_options={"include_usage": True})
    assert "Hi" in stream.text and "Hi" in asked.text
    for data in (usage_of(gateway_url, "u-exact", "exact-1", requests=4),
                 usage_of(gateway_url, "u-exact", requests=4)):
        assert data["requests"] == data["requests_priced"] == 4
        assert data["requests_unpriced"] == data["requests_without_usage"] == 0
        assert data["tokens"]["prompt"] == 4 * PROMPT
        assert data["tokens"]["cached"] == 4 * CACHED
        assert data["tokens"]["completion"] == 4 * COMPLETION
        assert data["spend"] == 4 * ONE_REQUEST_NANO / 10 ** 9
        # Everything fitted: the whole history is what was forwarded, at the same cost.
        assert data["tokens"]["original"] == data["tokens"]["forwarded"] > 0
        assert data["whole_history_cost"] == data["spend"]


def test_the_whole_history_is_priced_with_what_the_rewrite_left_out(gateway_url):
    long = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "word " * 200}
            for i in range(20)] + [{"role": "user", "content": "And now?"}]
    response = chat(gateway_url, ids("whole-1", "u-whole"), messages=long)
    original = int(response.headers["x-gateway-tokens-original"])
    forwarded = int(response.headers["x-gateway-tokens-forwarded"])
    assert original > forwarded
    prompt = PROMPT + original - forwarded  # the upstream's count, plus what was left out
    whole = (prompt - CACHED) * NANO_INPUT + CACHED * NANO_CACHED + COMPLETION * NANO_OUTPUT
    data = usage_of(gateway_url, "u-whole", "whole-1", requests=1)
    assert data["tokens"]["original"] == original and data["tokens"]["forwarded"] == forwarded
    assert data["spend"] == ONE_REQUEST_NANO / 10 ** 9
    assert data["whole_history_cost"] == whole / 10 ** 9


def test_a_model_without_a_price_has_a_null_spend_never_a_guess(gateway_url, caplog):
    with caplog.at_level(logging.INFO, logger="gateway.request"):
        chat(gateway_url, ids("unpriced-1", "u-unpriced"), model="unpriced")
    data = usage_of(gateway_url, "u-unpriced", requests=1)
    assert data["spend"] is None and data["whole_history_cost"] is None
    assert data["requests_unpriced"] == 1 and data["tokens"]["prompt"] == PROMPT
    line = [json.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.request"][-1]
    assert "spend" not in line and line["tokens_cached"] == CACHED


def test_the_log_line_and_metrics_carry_the_usage(gateway_url, caplog):
    with caplog.at_level(logging.INFO, logger="gateway.request"):
        chat(gateway_url, ids("log-1", "u-log"))
    line = [json.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.request"][-1]
    assert (line["tokens_prompt"], line["tokens_cached"], line["tokens_completion"]) == \
        (PROMPT, CACHED, COMPLETION)
    assert line["spend"] == ONE_REQUEST_NANO / 10 ** 9 == line["whole_cost"]
    metrics = httpx.get(gateway_url + "/metrics").text
    assert f'gateway_usage_tokens_total{{kind="cached",tenant="acme"}} {float(CACHED)}' in metrics
    assert f'gateway_spend_total{{tenant="acme"}} {ONE_REQUEST_NANO / 10 ** 9}' in metrics


def test_a_client_that_did_not_ask_for_usage_gets_the_stream_without_it(gateway_url, upstream):
    headers = ids("strip-1", "u-strip")
    plain = chat(gateway_url, headers, stream=True).content
    asked = chat(gateway_url, headers, stream=True, stream_options={"include_usage": True}).content
    # Both were asked of the upstream with the usage; the first client did not ask for it.
    assert [b["stream_options"] for b in upstream.bodies] == [{"include_usage": True}] * 2
    assert plain == sse(False)  # byte for byte what the upstream sends when not asked
    assert asked == sse(True)
    usage_of(gateway_url, "u-strip", requests=2)


def test_a_route_that_refuses_stream_options_gets_the_clients_stream_as_sent(gateway_url,
                                                                              upstream):
    chat(gateway_url, ids("strict-1", "u-strict"), model="strict", stream=True)
    assert "stream_options" not in upstream.bodies[-1]
    chat(gateway_url, ids("strict-1", "u-strict"), model="strict", stream=True,
         stream_options={"include_usage": True})
    assert upstream.bodies[-1]["stream_options"] == {"include_usage": True}  # the client's


def test_the_openai_sdk_sees_the_usage_chunk_only_when_it_asked(gateway_url):
    client = openai.OpenAI(base_url=gateway_url + "/v1", api_key=KEYS["acme"], max_retries=0)
    headers = ids("sdk-1", "u-sdk")
    plain = list(client.chat.completions.create(model="m", stream=True, extra_headers=headers,
                                                messages=[{"role": "user", "content": "Hi"}]))
    asked = list(client.chat.completions.create(model="m", stream=True, extra_headers=headers,
                                                stream_options={"include_usage": True},
                                                messages=[{"role": "user", "content": "Hi"}]))
    assert all(c.usage is None and c.choices for c in plain)
    assert asked[-1].choices == [] and asked[-1].usage.prompt_tokens == PROMPT
    assert usage_of(gateway_url, "u-sdk", requests=2)["tokens"]["cached"] == 2 * CACHED


def test_tenants_and_users_never_see_each_others_counters(gateway_url):
    for _ in range(3):
        chat(gateway_url, ids("shared-id", "canary-alice"))
    chat(gateway_url, ids("shared-id", "canary-bob"))
    for _ in range(2):
        chat(gateway_url, ids("shared-id", "canary-alice"), key=KEYS["globex"])
    expected = {("acme", "canary-alice"): 3, ("acme", "canary-bob"): 1,
                ("globex", "canary-alice"): 2}
    for (tenant, user), count in expected.items():
        for conversation in (None, "shared-id"):
            data = usage_of(gateway_url, user, conversation, key=KEYS[tenant], requests=count)
            assert data["requests"] == count, (tenant, user, conversation)
            assert data["tokens"]["prompt"] == count * PROMPT
            assert data["spend"] == count * ONE_REQUEST_NANO / 10 ** 9
    metrics = httpx.get(gateway_url + "/metrics").text
    assert f'gateway_spend_total{{tenant="globex"}} {2 * ONE_REQUEST_NANO / 10 ** 9}' in metrics
    for tenant, count in (("acme", 4), ("globex", 2)):
        totals = httpx.get(gateway_url + "/v1/usage",
                           headers={"Authorization": f"Bearer {KEYS[tenant]}"}).json()
        assert (totals["tenant"], totals["requests"]) == (tenant, count)
        assert totals["spend"] == count * ONE_REQUEST_NANO / 10 ** 9
    other = httpx.get(gateway_url + "/v1/usage", headers={
        "Authorization": f"Bearer {KEYS['acme']}", "X-Gateway-Tenant": "globex"})
    assert other.status_code == 403
    unknown = httpx.get(gateway_url + "/v1/memory/conversations/never-sent/usage",
                        headers={"Authorization": f"Bearer {KEYS['acme']}",
                                 "X-User-Id": "canary-alice"})
    assert unknown.status_code == 404


def test_deleting_a_conversation_deletes_its_counters_not_the_users(gateway_url):
    chat(gateway_url, ids("gone-1", "u-gone"))
    usage_of(gateway_url, "u-gone", "gone-1", requests=1)
    deleted = httpx.delete(gateway_url + "/v1/memory/conversations/gone-1",
                           headers={"Authorization": f"Bearer {KEYS['acme']}",
                                    "X-User-Id": "u-gone"}, timeout=30)
    assert deleted.status_code == 200
    gone = httpx.get(gateway_url + "/v1/memory/conversations/gone-1/usage",
                     headers={"Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": "u-gone"})
    assert gone.status_code == 404
    assert usage_of(gateway_url, "u-gone")["requests"] == 1


def test_the_other_doors_count_their_usage_streamed_or_not(gateway_url):
    headers = ids("doors-1", "u-doors")
    client = anthropic.Anthropic(base_url=gateway_url, api_key=KEYS["acme"], max_retries=0)
    client.messages.create(model="m", max_tokens=50, extra_headers=headers,
                           messages=[{"role": "user", "content": "Hi"}])
    with client.messages.stream(model="m", max_tokens=50, extra_headers=headers,
                                messages=[{"role": "user", "content": "Hi again"}]) as stream:
        assert stream.get_final_message().usage.cache_read_input_tokens == CACHED
    responses = openai.OpenAI(base_url=gateway_url + "/v1", api_key=KEYS["acme"], max_retries=0)
    responses.responses.create(model="m", input="Hi", extra_headers=ids("doors-2", "u-doors"))
    events = list(responses.responses.create(model="m", input="Hi", stream=True,
                                             extra_headers=ids("doors-3", "u-doors")))
    assert events[-1].response.usage.input_tokens_details.cached_tokens == CACHED
    data = usage_of(gateway_url, "u-doors", requests=4)
    assert data["requests"] == 4 and data["tokens"]["cached"] == 4 * CACHED
    assert data["tokens"]["completion"] == 4 * COMPLETION
    assert data["spend"] == 4 * ONE_REQUEST_NANO / 10 ** 9


def test_the_fake_upstream_reports_cached_tokens_streamed_or_not(gateway_url):
    headers = ids("fake-1", "u-fake")
    answer = chat(gateway_url, headers, model="fake-cached",
                  messages=[{"role": "user", "content": "tell me about the weather in Paris"}])
    usage = answer.json()["usage"]
    assert usage["prompt_tokens_details"] == {"cached_tokens": 8}
    chat(gateway_url, headers, model="fake-cached", stream=True,
         messages=[{"role": "user", "content": "tell me about the weather in Paris"}])
    data = usage_of(gateway_url, "u-fake", requests=2)
    assert data["tokens"]["cached"] == 16 and data["requests_priced"] == 2


def test_prompt_cache_key_names_the_conversation_unless_the_client_set_one(gateway_url,
                                                                          upstream):
    chat(gateway_url, ids("hint-1", "u-hint"), model="hinted")
    chat(gateway_url, ids("hint-1", "u-hint"), model="hinted")
    chat(gateway_url, ids("hint-2", "u-hint"), model="hinted")
    chat(gateway_url, ids("hint-1", "u-hint"), model="hinted", prompt_cache_key="mine")
    chat(gateway_url, ids("hint-1", "u-hint"))  # a route without hints (an api_base)
    chat(gateway_url, {}, model="hinted")  # no conversation: forwarded as sent
    keys = [b.get("prompt_cache_key") for b in upstream.bodies]
    assert keys[0] == keys[1] != keys[2]
    assert keys[0].startswith("cg-") and "hint" not in keys[0] and "u-hint" not in keys[0]
    assert keys[3:] == ["mine", None, None]


ANTHROPIC_ANSWER = {"id": "msg_1", "type": "message", "role": "assistant",
                    "model": "claude-sonnet-4-5", "stop_reason": "end_turn",
                    "content": [{"type": "text", "text": "Hi"}],
                    "usage": {"input_tokens": 10, "output_tokens": 5,
                              "cache_read_input_tokens": 2000,
                              "cache_creation_input_tokens": 300}}


def test_an_anthropic_route_gets_a_breakpoint_and_is_priced_from_litellms_map(redis_url,
                                                                              monkeypatch):
    """Through litellm to an Anthropic upstream (mocked at its HTTP edge): the system prompt
    ends with a cache breakpoint, and the cache read and write tokens are priced at litellm's
    prices for the model (claude-sonnet-4-5: 3 / 0.3 / 3.75 / 15 per million)."""
    import litellm  # noqa: F401 — imported before the gateway starts (seconds)

    monkeypatch.setenv("ANTHROPIC_TEST_KEY", "sk-ant-test")
    models = {"claude": {"model": "anthropic/claude-sonnet-4-5",
                         "api_base": "http://anthropic.test", "api_key_env": "ANTHROPIC_TEST_KEY"}}
    with respx.mock(assert_all_called=False) as mock, \
            running_gateway(gateway_config(redis_url, models=models)) as url:
        route = mock.post("http://anthropic.test/v1/messages").respond(json=ANTHROPIC_ANSWER)
        mock.route(host="127.0.0.1").pass_through()
        chat(url, ids("claude-1", "u-claude"), model="claude", messages=[
            {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
        sent = json.loads(route.calls.last.request.content)
        data = usage_of(url, "u-claude", requests=1)
    assert sent["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert sent["system"][-1]["text"] == "Be brief."
    assert data["tokens"]["prompt"] == 2310
    assert (data["tokens"]["cached"], data["tokens"]["cache_write"]) == (2000, 300)
    nano = 10 * 3000 + 2000 * 300 + 300 * 3750 + 5 * 15_000
    assert data["spend"] == nano / 10 ** 9


def _marked_prefix(sent: dict[str, Any]) -> list[Any]:
    """The Anthropic body's messages up to and including the last one with a breakpoint, as
    the cache sees them (the breakpoints themselves are not content)."""
    marked = [i for i, m in enumerate(sent["messages"]) if isinstance(m["content"], list)
              and any("cache_control" in part for part in m["content"])]
    return _unmarked(sent["messages"][:marked[-1] + 1]) if marked else []


def _unmarked(messages: list[dict[str, Any]]) -> list[Any]:
    def parts(content: Any) -> list[Any]:
        if isinstance(content, str):
            return [{"type": "text", "text": content}]
        return [{k: v for k, v in part.items() if k != "cache_control"} for part in content]
    return [(m["role"], parts(m["content"])) for m in messages]


def test_a_stepped_prompt_repeats_its_marked_prefix_request_after_request(redis_url,
                                                                          monkeypatch):
    """`context.assembly: stepped` through litellm to an Anthropic upstream (mocked at its
    HTTP edge), a conversation grown past the budget one exchange at a time: the body's
    second breakpoint ends the stepped window, each body repeats the previous one's messages
    up to it except at a step, the recalled memory travels after it as a user message (never
    hoisted into the system prompt), and `x-gateway-stable-messages` says where it is."""
    import litellm  # noqa: F401 — imported before the gateway starts (seconds)

    monkeypatch.setenv("ANTHROPIC_TEST_KEY", "sk-ant-test")
    models = {"claude": {"model": "anthropic/claude-sonnet-4-5",
                         "api_base": "http://anthropic.test", "api_key_env": "ANTHROPIC_TEST_KEY"}}
    config = gateway_config(redis_url, models=models, context={
        "max_context_tokens": 900, "reserve_completion_tokens": 100, "assembly": "stepped",
        "window_share": 0.75})
    history: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    sent, stable, forwarded = [], [], []
    with respx.mock(assert_all_called=False) as mock, running_gateway(config) as url:
        route = mock.post("http://anthropic.test/v1/messages").respond(json=ANTHROPIC_ANSWER)
        mock.route(host="127.0.0.1").pass_through()
        for n in range(16):
            history.append({"role": "user", "content": f"Question {n} about harbour {n}: "
                            + "what did the keeper of the old harbour say " * 6})
            response = chat(url, ids("stepped-1", "u-stepped"), model="claude",
                            messages=history)
            sent.append(json.loads(route.calls.last.request.content))
            stable.append(int(response.headers["x-gateway-stable-messages"]))
            forwarded.append(int(response.headers["x-gateway-tokens-forwarded"]) <
                             int(response.headers["x-gateway-tokens-original"]))
            history.append({"role": "assistant", "content": f"Answer {n}: "
                            + "the keeper said the harbour light was lit " * 6})
    assert sum(forwarded) >= 8  # most requests are over the budget
    assert all(body["system"] == [{"type": "text", "text": "Be brief.",
                                   "cache_control": {"type": "ephemeral"}}] for body in sent)
    steps = 0
    # The first request is its system prompt and question, nothing after: all of it stable.
    assert stable[0] == 2 and _marked_prefix(sent[0]) == _unmarked(sent[0]["messages"])
    for before, after in zip(sent[1:], sent[2:]):
        prefix = _marked_prefix(before)
        assert len(prefix) >= 2, (stable, [len(_marked_prefix(b)) for b in sent])
        if _unmarked(after["messages"][:len(prefix)]) != prefix:
            steps += 1
    # ~130 tokens an exchange; a window of up to 600 that restarts at ~300: a step every
    # third request or so once over the budget (a rolling window changes every request).
    assert steps <= 5, (steps, stable)
    # Recalled memory (older turns of the conversation) comes after the window, in the user
    # turn, never in the system prompt.
    recalled = [body for body in sent if RECALLED_HEADER in json.dumps(body["messages"][-1])]
    assert len(recalled) >= 4
    assert all(body["messages"][-1]["role"] == "user"
               and "cache_control" not in json.dumps(body["messages"][-1]) for body in recalled)
