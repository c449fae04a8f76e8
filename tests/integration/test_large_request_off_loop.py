"""A large request's heavy steps run on a worker thread, a small one's on the loop: counted
through `/metrics` (`gateway_off_loop_steps_total{step}`) over HTTP, through each door with its
real SDK, against a real store; the large request is answered and recorded as any other; while
another request is in flight it waits after each step (`gateway_off_loop_yields_total{step}`),
alone it does not."""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor

import anthropic
import httpx
import openai
import pytest

from gateway.pipeline.off_loop import MIN_BODY_BYTES, MIN_MESSAGES
from tests.support.gateway import KEYS, gateway_config, running_gateway

STEPS = ("parse", "reconcile", "count", "rewrite")


@pytest.fixture
def gateway_url(redis_url):
    # Memory off: what is counted here is the request path; memory work on 1,000 messages
    # (inline in tests) would only make the test slower.
    with running_gateway(gateway_config(redis_url, tenant={"memory": {"enabled": False}},
                                        models={"slower": {"model": "fake/slow-5000"}})) as url:
        yield url


def off_loop_counts(url: str, metric: str = "gateway_off_loop_steps_total") -> dict[str, float]:
    text = httpx.get(url + "/metrics").text
    found = dict(re.findall(rf'^{metric}\{{step="(\w+)"\}} (\S+)$', text, re.MULTILINE))
    return {step: float(found.get(step, 0)) for step in STEPS}


def in_flight(url: str) -> float:
    text = httpx.get(url + "/metrics").text
    return float(re.search(r"^gateway_requests_in_flight (\S+)$", text, re.MULTILINE)[1])


def large_history() -> list[dict[str, str]]:
    """More messages than MIN_MESSAGES and more bytes than MIN_BODY_BYTES, user last."""
    count = MIN_MESSAGES + 1
    chars = MIN_BODY_BYTES // count + 50
    return [{"role": "user" if i % 2 == 0 else "assistant",
             "content": f"message {i}: " + "lorem ipsum dolor " * (chars // 18)}
            for i in range(count)]


def chat(url: str, conversation: str, messages: list[dict[str, str]],
         model: str = "messages") -> str:
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEYS["acme"], max_retries=0)
    reply = client.chat.completions.create(
        model=model, messages=messages, extra_headers={"X-Conversation-Id": conversation})
    return reply.choices[0].message.content or ""


def test_a_large_chat_request_runs_its_heavy_steps_off_the_loop_and_a_small_one_does_not(
        gateway_url):
    before = off_loop_counts(gateway_url)
    history = large_history()
    assert len(json.dumps({"messages": history})) > MIN_BODY_BYTES
    forwarded = json.loads(chat(gateway_url, "large-chat", history))
    after_large = off_loop_counts(gateway_url)
    assert {s: after_large[s] - before[s] for s in STEPS} == {s: 1 for s in STEPS}
    # Answered as any request: the current message is forwarded as sent.
    assert forwarded[-1] == history[-1]

    chat(gateway_url, "small-chat", [{"role": "user", "content": "Hello there"}])
    assert off_loop_counts(gateway_url) == after_large


def test_a_resent_large_conversation_reconciles_off_the_loop_with_its_stored_transcript(
        gateway_url):
    history = large_history()
    chat(gateway_url, "large-resent", history)
    before = off_loop_counts(gateway_url)
    resent = [*history, {"role": "assistant", "content": "noted"},
              {"role": "user", "content": "and what came first?"}]
    forwarded = json.loads(chat(gateway_url, "large-resent", resent))
    assert forwarded[-1] == resent[-1]
    assert {s: off_loop_counts(gateway_url)[s] - before[s] for s in STEPS} == \
        {s: 1 for s in STEPS}


def test_a_stateful_request_on_a_large_stored_conversation_rewrites_off_the_loop(gateway_url):
    history = large_history()
    chat(gateway_url, "large-stateful", history)
    before = off_loop_counts(gateway_url)
    chat(gateway_url, "large-stateful", [{"role": "user", "content": "one more question"}])
    after = off_loop_counts(gateway_url)
    # A small body (parsed on the loop) over a large stored transcript.
    assert {s: after[s] - before[s] for s in STEPS} == {"parse": 0, "reconcile": 1,
                                                        "count": 1, "rewrite": 1}


def test_the_messages_and_responses_doors_parse_a_large_body_off_the_loop(gateway_url):
    history = large_history()
    before = off_loop_counts(gateway_url)
    messages = anthropic.Anthropic(base_url=gateway_url, api_key=KEYS["acme"], max_retries=0)
    reply = messages.messages.create(model="messages", max_tokens=64, messages=history,
                                     extra_headers={"X-Conversation-Id": "large-messages"})
    assert json.loads(reply.content[0].text)[-1] == history[-1]
    responses = openai.OpenAI(base_url=gateway_url + "/v1", api_key=KEYS["acme"],
                              max_retries=0)
    answer = responses.responses.create(model="messages", input=history,
                                        extra_headers={"X-Conversation-Id": "large-responses"})
    assert json.loads(answer.output_text)[-1] == history[-1]
    after = off_loop_counts(gateway_url)
    assert {s: after[s] - before[s] for s in STEPS} == {s: 2 for s in STEPS}
    # A small request through each door stays on the loop.
    messages.messages.create(model="echo", max_tokens=16,
                             messages=[{"role": "user", "content": "Hi"}],
                             extra_headers={"X-Conversation-Id": "small-messages"})
    responses.responses.create(model="echo", input="Hi",
                               extra_headers={"X-Conversation-Id": "small-responses"})
    assert off_loop_counts(gateway_url) == after


def test_a_large_request_waits_after_each_step_while_another_is_in_flight_and_not_alone(
        gateway_url):
    yields = "gateway_off_loop_yields_total"
    before = off_loop_counts(gateway_url, yields)
    with ThreadPoolExecutor(1) as pool:
        slow = pool.submit(chat, gateway_url, "slow-beside",
                           [{"role": "user", "content": "take your time"}], "slower")
        deadline = time.monotonic() + 10
        while in_flight(gateway_url) < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert in_flight(gateway_url) == 1
        history = large_history()
        forwarded = json.loads(chat(gateway_url, "large-beside", history))
        assert not slow.done()  # in flight for all of the large request
        assert forwarded[-1] == history[-1]
        beside = off_loop_counts(gateway_url, yields)
        assert {s: beside[s] - before[s] for s in STEPS} == {s: 1 for s in STEPS}
        assert slow.result() == "take your time"
    assert in_flight(gateway_url) == 0
    chat(gateway_url, "large-alone", large_history())
    assert off_loop_counts(gateway_url, yields) == beside
