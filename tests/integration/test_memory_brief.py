"""A conversation's memory brief end to end (issue 40): made at the conversation's first
request from what the user's other conversations hold, forwarded byte-identical right after
the client's system prompt on every later request (stateless and stateful clients, the chat
and the Anthropic doors), made again without what the user deletes, never another user's.

The real app over HTTP, the real `openai` and `anthropic` SDKs, a real store, inline recording;
the `fake/echo-messages` upstream answers with the messages it received."""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Iterator

import anthropic
import httpx
import openai
import pytest
import redis

from gateway.core.messages import Message
from gateway.core.text.tokens import count_message
from gateway.memory.records.keys import MemoryKeySpace
from gateway.tokenizer import tokenizer_for_model
from tests.support.gateway import KEYS, conversation_key, forwarded, gateway_config, \
    running_gateway

SYSTEM = "You are a careful assistant. Answer in one paragraph."
NAME = "My name is Zorblax Canary."
FACT_LINE = "user name: Zorblax Canary"
BRIEF_HEADER = "Known about the user from earlier conversations"


@pytest.fixture
def gateway_url(redis_url: str) -> Iterator[str]:
    config = gateway_config(redis_url, tenant={"memory": {"facts_k": 5, "brief_tokens": 400}})
    with running_gateway(config) as url:
        yield url


def headers(conversation: str, user: str, persist: bool = True) -> dict[str, str]:
    out = {"X-Conversation-Id": conversation, "X-User-Id": user}
    if not persist:
        out["X-Gateway-Persist"] = "false"
    return out


def chat(url: str, messages: list[dict[str, Any]], conversation: str, user: str,
         model: str = "messages", persist: bool = True) -> tuple[list[dict[str, Any]], str]:
    """(what the upstream received, the reply's text)."""
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEYS["acme"], max_retries=0)
    reply = client.chat.completions.create(model=model, messages=messages,  # type: ignore
                                           extra_headers=headers(conversation, user, persist))
    text = reply.choices[0].message.content or ""
    return (forwarded(text) if model == "messages" else []), text


def remember(url: str, user: str = "ursula") -> None:
    chat(url, [{"role": "user", "content": NAME}], "earlier", user, model="echo")
    chat(url, [{"role": "user", "content": "I keep bees on the roof."}], "earlier", user,
         model="echo")


def briefs(sent: list[dict[str, Any]]) -> list[str]:
    return [str(m["content"]) for m in sent if str(m.get("content", "")).startswith(BRIEF_HEADER)]


def test_brief_is_byte_identical_after_the_system_prompt_on_later_requests(gateway_url):
    remember(gateway_url)
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    sent_each = []
    for text in ("What is my name?", "Thanks. And tell me a joke.", "One more joke please."):
        history.append({"role": "user", "content": text})
        sent, reply = chat(gateway_url, history, "new", "ursula")  # stateless: whole history
        sent_each.append(sent)
        history.append({"role": "assistant", "content": reply})
    first, second, third = sent_each
    assert first[0] == {"role": "system", "content": SYSTEM}
    assert first[1]["role"] == "system" and first[1]["content"].startswith(BRIEF_HEADER)
    assert FACT_LINE in first[1]["content"] and NAME in first[1]["content"]
    # The 2nd and 3rd requests carry the same bytes in the same place, once.
    assert second[1] == third[1] == first[1]
    assert len(briefs(second)) == len(briefs(third)) == 1
    # Not asking about the past: nothing recalled from elsewhere after the history.
    assert [m for m in third[2:] if m["role"] == "system"] == []
    # A stateful client (only the new message) gets the stored brief too.
    sent, _ = chat(gateway_url, [{"role": "system", "content": SYSTEM},
                                 {"role": "user", "content": "Bye for now."}], "new", "ursula")
    assert sent[1] == first[1]


def test_a_deleted_fact_leaves_the_brief_at_the_next_request(gateway_url, redis_url):
    remember(gateway_url)
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": "What is my name?"}]
    sent, _ = chat(gateway_url, messages, "new", "ursula")
    assert FACT_LINE in sent[1]["content"]
    api = {"Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": "ursula"}
    response = httpx.delete(gateway_url + "/v1/memory/facts/user_name", headers=api, timeout=30)
    assert response.status_code == 200, response.text
    sent, _ = chat(gateway_url, [{"role": "system", "content": SYSTEM},
                                 {"role": "user", "content": "What is my name again?"}],
                   "new", "ursula")
    assert briefs(sent) and not any(FACT_LINE in b for b in briefs(sent))
    # (the stored echo reply, in the history, still quotes the first request's prompt)
    assert not any(FACT_LINE in str(m["content"]) for m in sent if m["role"] == "system")
    # Deleting the conversation removes its brief from the store.
    key = MemoryKeySpace().conversation(conversation_key("new", user="ursula")).brief
    with redis.Redis.from_url(redis_url, decode_responses=True) as r:
        assert r.exists(key)
        assert httpx.delete(gateway_url + "/v1/memory/conversations/new", headers=api,
                            timeout=30).status_code == 200
        assert not r.exists(key)


def test_another_users_brief_never_shows_the_canary(gateway_url):
    remember(gateway_url, "ursula")
    chat(gateway_url, [{"role": "user", "content": "I like tea."}], "earlier", "victor",
         model="echo")
    for question in ("What is my name?", "Do you remember my name? Zorblax?"):
        sent, _ = chat(gateway_url, [{"role": "system", "content": SYSTEM},
                                     {"role": "user", "content": question}], "new", "victor")
        assert all("Zorblax" not in str(m["content"]) for m in sent if m["role"] == "system")


def test_the_anthropic_door_forwards_the_same_brief_after_its_system_prompt(gateway_url):
    remember(gateway_url)
    client = anthropic.Anthropic(base_url=gateway_url, api_key=KEYS["acme"], max_retries=0)
    messages: list[dict[str, Any]] = []
    sent_each = []
    for text in ("What is my name?", "Thanks. Tell me a joke.", "Another one."):
        messages.append({"role": "user", "content": text})
        answer = client.messages.create(model="messages", max_tokens=64, system=SYSTEM,
                                        messages=messages,  # type: ignore[arg-type]
                                        extra_headers=headers("anth", "ursula"))
        reply = answer.content[0].text  # type: ignore[union-attr]
        sent_each.append(forwarded(reply))
        messages.append({"role": "assistant", "content": reply})
    first, second, third = sent_each
    assert first[0]["role"] == "system" and SYSTEM in json.dumps(first[0])
    assert briefs(first) and first[1]["content"].startswith(BRIEF_HEADER)
    assert second[1] == third[1] == first[1]


def test_the_profile_of_the_users_other_conversations_is_in_a_new_conversations_brief(
        gateway_url):
    chat(gateway_url, [{"role": "user", "content": "Please answer in bullet points."}], "one",
         "petra", model="echo")
    sent, _ = chat(gateway_url, [{"role": "user", "content": "And the weather?"}], "one",
                   "petra", persist=False)
    assert not briefs(sent)  # its own profile: in its history, not repeated
    sent, _ = chat(gateway_url, [{"role": "user", "content": "And the weather?"}], "two",
                   "petra")
    (brief,) = briefs(sent)
    assert "bullet" in brief and sent[0]["content"] == brief
    assert [m for m in sent[1:] if m["role"] == "system"] == []  # no profile block after


def test_the_user_control_api_and_the_export_show_the_brief(gateway_url):
    remember(gateway_url)
    sent, _ = chat(gateway_url, [{"role": "system", "content": SYSTEM},
                                 {"role": "user", "content": "What is my name?"}], "new",
                   "ursula")
    api = {"Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": "ursula"}
    shown = httpx.get(gateway_url + "/v1/memory/conversations/new/brief", headers=api,
                      timeout=30).json()
    assert shown["object"] == "memory.brief" and shown["content"] == sent[1]["content"]
    assert shown["tokens"] > 0 and shown["budget"] == 400 and shown["item_ids"]
    exported = httpx.get(gateway_url + "/v1/memory/export", headers=api, timeout=30).json()
    by_id = {c["id"]: c for c in exported["conversations"]}
    assert by_id["new"]["brief"]["content"] == sent[1]["content"]
    assert by_id["earlier"]["brief"] is not None  # made at its first request (no memory yet)
    other = {"Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": "victor"}
    assert httpx.get(gateway_url + "/v1/memory/conversations/new/brief", headers=other,
                     timeout=30).status_code == 404


def test_the_console_shows_the_brief_as_text(redis_url):
    from tests.support import console

    xss = "I said <script>alert(1)</script> about my name Zorblax."
    with running_gateway(console.console_config(redis_url, facts_k=5, brief_tokens=400)) as url:
        console.chat(url, "erin", "c1", [{"role": "user", "content": NAME}])
        console.chat(url, "erin", "c1", [{"role": "user", "content": xss}])
        console.chat(url, "erin", "c2", [{"role": "user", "content": "What is my name?"}])
        page = console.signed_in(url).get("/console/t/acme/u/erin/c/c2").text
    shown = page[page.index("<h2>Memory brief</h2>"):page.index("<h2>Pinned messages</h2>")]
    assert 'class="brief"' in shown and "Zorblax Canary" in shown
    assert "<script>" not in shown and "&lt;script&gt;" in shown


def logged_line(caplog: Any, formatter: logging.Formatter, **fields: str) -> dict[str, Any]:
    """The one request log line with `fields` (it is written as the response ends, so it may
    come a moment after the client has the answer: waited for, up to 30 s)."""
    deadline = time.monotonic() + 30
    while True:
        lines = [json.loads(formatter.format(r)) for r in caplog.records]
        found = [x for x in lines if x.get("event") == "chat_completion"
                 and all(x.get(k) == v for k, v in fields.items())]
        if found or time.monotonic() > deadline:
            (line,) = found
            return line
        time.sleep(0.02)


def test_the_log_line_counts_the_briefs_tokens(gateway_url, caplog):
    from gateway.ops.logs import JsonFormatter

    remember(gateway_url)
    with caplog.at_level(logging.INFO):
        sent, _ = chat(gateway_url, [{"role": "system", "content": SYSTEM},
                                     {"role": "user", "content": "What is my name?"}], "new",
                       "ursula")
        line = logged_line(caplog, JsonFormatter(), conversation="new")
    assert line["brief_tokens"] > 0
    assert line["brief_tokens"] == count_message(Message.from_openai(sent[1]),
                                                 tokenizer_for_model("fake/echo-messages"))


@pytest.mark.parametrize("memory", [{"scope": "conversation", "brief_tokens": 400}, {"brief_tokens": 0}])
def test_no_brief_when_scoped_to_conversations_or_with_no_budget(redis_url, memory):
    with running_gateway(gateway_config(redis_url, tenant={"memory": memory})) as url:
        remember(url)
        sent, _ = chat(url, [{"role": "system", "content": SYSTEM},
                             {"role": "user", "content": "What is my name?"}], "new", "ursula")
        assert briefs(sent) == []
        api = {"Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": "ursula"}
        assert httpx.get(url + "/v1/memory/conversations/new/brief", headers=api,
                         timeout=30).json()["content"] is None


def test_a_brief_that_cannot_be_read_fails_open(gateway_url, redis_url):
    remember(gateway_url)
    key = MemoryKeySpace().conversation(conversation_key("new", user="ursula")).brief
    with redis.Redis.from_url(redis_url, decode_responses=True) as r:
        r.hset(key, "not", "a string")  # every read of the brief fails (WRONGTYPE)
    client = openai.OpenAI(base_url=gateway_url + "/v1", api_key=KEYS["acme"], max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="messages", messages=[{"role": "system", "content": SYSTEM},
                                    {"role": "user", "content": "What is my name?"}],
        extra_headers=headers("new", "ursula"))
    sent = forwarded(raw.parse().choices[0].message.content or "")
    assert briefs(sent) == [] and sent[0]["content"] == SYSTEM
    assert "ResponseError" in raw.headers["x-gateway-memory-error"]


def test_a_request_asking_about_the_past_gets_what_the_brief_could_not_hold_after_the_history(
        redis_url):
    """The request that makes the brief too; a message that does not ask about the past
    gets the brief alone, at its conversation's first request as later."""
    config = gateway_config(redis_url, tenant={"memory": {"facts_k": 5, "brief_tokens": 50}})
    with running_gateway(config) as url:
        remember(url)
        history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                         {"role": "user", "content": "What is my name?"}]
        first, reply = chat(url, history, "new", "ursula")
        brief = briefs(first)
        tail = [str(m["content"]) for m in first[2:] if m["role"] == "system"]
        assert len(brief) == 1 and len(tail) == 1

        def items(block: str) -> set[str]:
            return {line for line in block.splitlines() if line.startswith("- ")}

        # The brief takes what fits its budget; the rest follows the history, not repeated.
        assert items(brief[0]) and items(tail[0]) and not items(brief[0]) & items(tail[0])
        shown = "\n".join(items(brief[0]) | items(tail[0]))
        assert NAME in shown and FACT_LINE in shown
        history += [{"role": "assistant", "content": reply},
                    {"role": "user", "content": "Thanks. And tell me a joke."}]
        second, _ = chat(url, history, "new", "ursula")
        assert briefs(second) == brief  # the same bytes, and nothing after the history
        assert [m for m in second[2:] if m["role"] == "system"] == []
        joke = "Tell me a joke about my name and my bees."  # more than the brief holds
        opening, _ = chat(url, [{"role": "system", "content": SYSTEM},
                                {"role": "user", "content": joke}], "another", "ursula")
        assert len(briefs(opening)) == 1
        assert [m for m in opening[2:] if m["role"] == "system"] == []
