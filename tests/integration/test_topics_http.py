"""Topic state end to end: the real gateway over HTTP, a real store, inline recording (the
recorder and the memory worker have run when a reply returns), the real openai SDK as client,
the fake upstream, and the test embedder (hashed words: texts sharing no words are unrelated).
The optional LLM classifier is answered at the HTTP edge (respx routes served on loopback)."""

from __future__ import annotations

import json
import logging
import urllib.parse
from typing import Any, Iterator

import httpx
import openai
import pytest
import respx

from tests.support.gateway import KEYS, gateway_config, running_gateway
from tests.support.http_edge import Edge, http_edge

ALICE, MALLORY = "alice-T1", "mallory-T2"
MARATHON = [
    "I am training for the Berlin marathon in September.",
    "Marathon training means long runs every Sunday morning.",
    "Which running shoes suit marathon long runs?",
    "Should marathon runners eat gels during long runs?",
]
SOURDOUGH = [
    "Completely different question: my sourdough starter smells like acetone.",
    "Does sourdough starter need feeding twice daily?",
    "What flour keeps a sourdough starter active?",
]
CHINESE = [
    "我最近在准备北京马拉松比赛，每周跑步四次。",
    "北京马拉松比赛前一周应该减少跑步量吗？",
    "北京马拉松比赛当天早上吃什么比较好？",
]
TOPICS_BASE = "http://topics.test/v1"


def config(redis_url: str, topics: dict[str, Any] | None = None,
           memory: dict[str, Any] | None = None, classifier_base: str = TOPICS_BASE) -> Any:
    return gateway_config(
        redis_url,
        models={"classifier": {"model": "openai/gpt-4o-mini", "api_base": classifier_base}},
        context={"max_context_tokens": 4000, "reserve_completion_tokens": 200},
        # Summaries only when a topic ends (min_rounds is out of reach): the chunk made is
        # the finished topic's.
        tenant={"memory": {"compaction": {"min_rounds": 50, "min_tokens": 100_000,
                                          "recent_window_turns": 1},
                           # The test embedder's scale: related texts here score >= 0.2.
                           "topics": {"similarity": 0.2, **(topics or {})},
                           **(memory or {})}})


@pytest.fixture
def url(redis_url) -> Iterator[str]:
    with running_gateway(config(redis_url)) as base:
        yield base


def sdk(url: str, conversation: str, user: str = ALICE) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=KEYS["acme"], max_retries=0,
                         default_headers={"X-Conversation-Id": conversation, "X-User-Id": user})


def say(client: openai.OpenAI, text: str) -> Any:
    """A stateful client's turn (only the new message); the raw response."""
    return client.chat.completions.with_raw_response.create(
        model="echo", messages=[{"role": "user", "content": text}])


def topics(url: str, conversation: str, user: str = ALICE) -> httpx.Response:
    return httpx.get(f"{url}/v1/memory/conversations/{conversation}/topics", timeout=30,
                     headers={"Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": user})


def header_label(response: Any) -> str | None:
    """The `x-gateway-topic` header, decoded (RFC 8187 ext-value when not plain ASCII)."""
    value = response.headers.get("x-gateway-topic")
    if value is None:
        return None
    assert value.isascii()
    return urllib.parse.unquote(value.removeprefix("UTF-8''"))


def request_lines(caplog) -> list[dict[str, Any]]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.request"]


def test_a_topic_switch_is_detected_labelled_exposed_and_its_finished_topic_compacted(
        url, caplog):
    caplog.set_level(logging.INFO, logger="gateway.request")
    client = sdk(url, "run-then-bake")
    for text in MARATHON:
        response = say(client, text)
    assert "marathon" in header_label(response).split()
    for text in SOURDOUGH:
        response = say(client, text)
    # The header reads the state the previous turn left: the new topic by now.
    assert "sourdough" in header_label(response).split()
    line = request_lines(caplog)[-1]
    assert "sourdough" in line["topic"] and line["topic_segment"] == 1

    body = topics(url, "run-then-bake").json()
    first, second = body["data"]
    assert body["object"] == "memory.topics" and body["current"] == second
    assert "marathon" in first["label"] and "sourdough" in second["label"]
    # Four marathon rounds (user + echoed reply each), then the switch at the fifth message.
    assert (first["start"], first["end"], second["start"], second["end"]) == (0, 7, 8, None)
    assert (second["method"], second["turns"]) == ("embedding", len(SOURDOUGH))

    # The switch fed compaction: the finished topic, exactly, became one summary chunk.
    chunks = httpx.get(f"{url}/v1/memory/conversations/run-then-bake/chunks", timeout=30,
                       headers={"Authorization": f"Bearer {KEYS['acme']}",
                                "X-User-Id": ALICE}).json()["data"]
    assert len(chunks) == 1
    sources = [s["content"] for s in chunks[0]["sources"]]
    assert sources[0] == MARATHON[0] and sources[-1] == MARATHON[-1] and len(sources) == 8
    assert not any("sourdough" in s for s in sources)


def test_one_topic_stays_one_topic_and_a_short_aside_does_not_switch(url):
    client = sdk(url, "one-topic")
    for text in [*MARATHON[:2], "ok, thanks!", *MARATHON[2:]]:
        say(client, text)
    body = topics(url, "one-topic").json()
    assert len(body["data"]) == 1 and body["current"]["turns"] == len(MARATHON) + 1


def test_a_chinese_label_travels_percent_encoded_in_the_header(url, caplog):
    caplog.set_level(logging.INFO, logger="gateway.request")
    client = sdk(url, "zh")
    for text in CHINESE:
        response = say(client, text)
    raw = response.headers["x-gateway-topic"]
    assert raw.startswith("UTF-8''%") and raw.isascii()
    label = header_label(response)
    assert "北京" in label and ("马拉" in label or "拉松" in label)
    assert request_lines(caplog)[-1]["topic"] == label  # the log line keeps it in clear


def test_topics_are_the_users_own_and_bad_ids_are_a_4xx(url):
    say(sdk(url, "private"), MARATHON[0])
    assert topics(url, "private").status_code == 200
    other = topics(url, "private", user=MALLORY)
    assert other.status_code == 404
    assert set(other.json()["error"]) == {"message", "type", "param", "code"}
    bad = topics(url, "not a valid id!")
    assert bad.status_code in (400, 404) and bad.json()["error"]["param"] in (
        "conversation_id", None)
    anonymous = httpx.get(f"{url}/v1/memory/conversations/private/topics", timeout=30,
                          headers={"Authorization": "Bearer wrong"})
    assert anonymous.status_code == 401


def test_with_topics_off_no_header_no_log_field_and_no_state(redis_url, caplog):
    caplog.set_level(logging.INFO, logger="gateway.request")
    with running_gateway(config(redis_url, {"enabled": False})) as base:
        client = sdk(base, "untracked")
        for text in [*MARATHON, *SOURDOUGH]:
            response = say(client, text)
        assert "x-gateway-topic" not in response.headers
        assert "topic" not in request_lines(caplog)[-1]
        body = topics(base, "untracked").json()
        assert body["current"] is None and body["data"] == []


@pytest.fixture
def classifier_edge() -> Iterator[Edge]:
    """The classifier model's HTTP edge: a loopback server answering from `edge.router`."""
    with http_edge() as edge:
        edge.router = respx.MockRouter(assert_all_called=False)
        yield edge


def answer(text: str) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}]}


def test_the_llm_classifier_decides_when_it_answers(redis_url, classifier_edge):
    """It calls a switch the embedding would not (the texts share words), and its prompt
    carries the current topic and the new message."""
    route = classifier_edge.router.post(f"{classifier_edge.url}/v1/chat/completions").mock(
        side_effect=lambda request: httpx.Response(200, json=answer(
            "NEW" if "new subject" in request.content.decode() else "SAME")))
    with running_gateway(config(redis_url, {"classifier": True},
                                {"summarizer_model": "classifier"},
                                classifier_base=classifier_edge.url + "/v1")) as base:
        client = sdk(base, "classified")
        for text in [*MARATHON, "A new subject about the marathon long runs shoes."]:
            say(client, text)
        body = topics(base, "classified").json()
    assert [t["method"] for t in body["data"]] == ["start", "llm"]
    prompts = [json.loads(c.request.content)["messages"][1]["content"] for c in route.calls
               if "<new>" in json.loads(c.request.content)["messages"][1]["content"]]
    assert prompts and "Current topic: " in prompts[-1] and "new subject" in prompts[-1]


def test_the_llm_classifier_failing_falls_back_to_embedding_drift(redis_url, classifier_edge):
    classifier_edge.router.post(f"{classifier_edge.url}/v1/chat/completions").respond(
        500, json={"error": {"message": "down", "type": "server_error", "param": None,
                             "code": None}})
    with running_gateway(config(redis_url, {"classifier": True},
                                {"summarizer_model": "classifier"},
                                classifier_base=classifier_edge.url + "/v1")) as base:
        client = sdk(base, "fallback")
        for text in [*MARATHON, *SOURDOUGH]:
            response = say(client, text)
        assert response.status_code == 200
        body = topics(base, "fallback").json()
    assert [t["method"] for t in body["data"]] == ["start", "embedding"]
    assert "sourdough" in body["current"]["label"]


def test_a_classifier_without_a_summariser_model_is_refused_naming_the_key(redis_url):
    with pytest.raises(Exception, match=r"memory\.topics\.classifier"):
        config(redis_url, {"classifier": True})
    with pytest.raises(Exception, match=r"boost"):
        config(redis_url, {"boost": 2})


def test_an_edited_turn_drops_the_topics_after_the_fork(url):
    """A stateless client resends the history; editing the turn that switched topics moves the
    conversation to a new branch, walked again: the sourdough topic is gone."""
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEYS["acme"], max_retries=0,
                           default_headers={"X-Conversation-Id": "edited", "X-User-Id": ALICE})
    history: list[dict[str, Any]] = []
    for text in [*MARATHON, *SOURDOUGH[:2]]:
        history.append({"role": "user", "content": text})
        reply = client.chat.completions.create(model="echo", messages=history)
        history.append({"role": "assistant", "content": reply.choices[0].message.content})
    assert len(topics(url, "edited").json()["data"]) == 2
    edited = [*history[:8], {"role": "user", "content": "And how long should marathon long "
                                                        "runs be?"}]
    client.chat.completions.create(model="echo", messages=edited)
    body = topics(url, "edited").json()
    assert len(body["data"]) == 1 and "marathon" in body["current"]["label"]
    assert body["current"]["turns"] == len(MARATHON) + 1


def test_a_user_who_switched_memory_off_gets_no_topic_header(url):
    client = sdk(url, "switched-off")
    for text in MARATHON[:2]:
        response = say(client, text)
    assert header_label(response)
    off = httpx.patch(url + "/v1/memory/settings", json={"memory": False}, timeout=30,
                      headers={"Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": ALICE})
    assert off.status_code == 200
    assert "x-gateway-topic" not in say(client, MARATHON[2]).headers
