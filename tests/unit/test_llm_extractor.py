"""LlmFactExtractor: the model's JSON facts when usable; the heuristic whenever not.

The HTTP edge to litellm is mocked with respx (conftest sets DISABLE_AIOHTTP_TRANSPORT);
a timeout and an error are simulated by a small fake implementing ports.Upstream.
"""

from __future__ import annotations

import asyncio
import json
import logging

import httpx
import pytest
import respx

from gateway.core.messages import Message, chain
from gateway.errors import UpstreamError
from gateway.memory.jobs.extractor import DEFAULT_PROMPT, LlmFactExtractor, extract_facts
from gateway.ports import UpstreamCall
from gateway.upstream.litellm_upstream import LitellmUpstream

BASE = "http://llm.test/v1"
URL = f"{BASE}/chat/completions"
MODEL = "openai/gpt-4o-mini"

STORED = chain(None, [
    Message.of("user", "我叫张三，我的手机号是13812345678，住在北京。"),
    Message.of("assistant", "好的，张先生。"),
    Message.of("user", "合同金额是30万元，2023年3月1日签订的。"),
], created_at=1_700_000_000.0)


def completion(content: str) -> dict:
    return {"id": "chatcmpl-x", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


@pytest.fixture(scope="module")
def litellm_upstream() -> LitellmUpstream:
    return LitellmUpstream()


@pytest.fixture
def extractor(litellm_upstream) -> LlmFactExtractor:
    # A ceiling, never waited for (respx answers at once): litellm's first call imports and
    # sets up for several seconds on a busy machine, which a 5 s ceiling made a failure.
    return LlmFactExtractor(litellm_upstream, MODEL, api_base=BASE, api_key="sk-test",
                            timeout=120)


@pytest.fixture
def mock():
    with respx.mock(assert_all_called=True) as router:
        yield router


def heuristic_keys() -> set[str]:
    return {"user_name", "user_location", "contract_amount", "contract_date"}


async def test_valid_json_facts_are_used_with_sources_and_redacted_prompt(extractor, mock):
    answer = {"facts": [
        {"key": "User Name", "value": "张三", "type": "fact", "importance": 0.9,
         "confidence": 0.95, "source": 1},
        {"key": "contract_amount", "value": "30万元", "type": "fact", "importance": 1.7,
         "confidence": "high", "source": 3},
        {"key": "user_phone", "value": "13812345678", "type": "fact"},   # PII: dropped
        {"key": "", "value": "x"}, {"value": "no key"}, "not an object",  # malformed: skipped
    ]}
    route = mock.post(URL).respond(200, json=completion(json.dumps(answer, ensure_ascii=False)))
    facts = await extractor.extract(STORED)
    assert [(f.key, f.value, f.source_ids) for f in facts] == [
        ("user_name", "张三", (STORED[0].id,)), ("contract_amount", "30万元", (STORED[2].id,))]
    assert facts[1].importance == 1.0 and facts[1].confidence == 0.7  # clamped / defaulted
    assert facts[0].updated_at == STORED[-1].created_at
    sent = json.loads(route.calls.last.request.content)
    assert sent["messages"][0]["content"] == DEFAULT_PROMPT
    assert sent["response_format"] == {"type": "json_object"}
    assert "13812345678" not in sent["messages"][1]["content"]
    assert "[PHONE]" in sent["messages"][1]["content"]


async def test_fenced_json_is_accepted(extractor, mock):
    mock.post(URL).respond(200, json=completion(
        '```json\n{"facts": [{"key": "user_location", "value": "北京"}]}\n```'))
    facts = await extractor.extract(STORED)
    assert [(f.key, f.value, f.source_ids) for f in facts] == [
        ("user_location", "北京", (STORED[0].id, STORED[2].id))]


@pytest.mark.parametrize("content", [
    "Sure! Here are the facts: name is 张三",      # not JSON
    '{"facts": {"key": "user_name"}}',            # wrong shape
    '[{"key": "user_name", "value": "张三"}]',     # not an object
    '{"memories": []}',                           # wrong schema
])
async def test_unusable_answers_fall_back_to_the_heuristic(extractor, mock, content, caplog):
    mock.post(URL).respond(200, json=completion(content))
    with caplog.at_level(logging.WARNING, "gateway.memory.jobs.extractor"):
        assert await extractor.extract(STORED) is None
        facts = await extract_facts(STORED, extractor)
    assert {f.key for f in facts} == heuristic_keys()
    assert "using the heuristic" in caplog.text


async def test_an_upstream_http_error_falls_back(extractor, mock):
    mock.post(URL).respond(500, json={"error": {"message": "boom", "type": "server_error"}})
    facts = await extract_facts(STORED, extractor)
    assert {f.key for f in facts} == heuristic_keys()


async def test_an_http_timeout_falls_back(extractor, mock):
    mock.post(URL).mock(side_effect=httpx.ReadTimeout("slow"))
    facts = await extract_facts(STORED, extractor)
    assert {f.key for f in facts} == heuristic_keys()


class HangingUpstream:
    """ports.Upstream that never answers (or raises, when given an error)."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.calls: list[UpstreamCall] = []

    async def complete(self, call: UpstreamCall) -> dict:
        self.calls.append(call)
        if self.error:
            raise self.error
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    def stream(self, call: UpstreamCall):
        raise NotImplementedError


async def test_a_hanging_upstream_is_cut_at_the_timeout_and_falls_back():
    upstream = HangingUpstream()
    extractor = LlmFactExtractor(upstream, "fake/x", timeout=0.05)
    facts = await extract_facts(STORED, extractor)
    assert {f.key for f in facts} == heuristic_keys()
    assert upstream.calls[0].timeout == 0.05


async def test_an_upstream_error_from_the_port_falls_back():
    extractor = LlmFactExtractor(HangingUpstream(UpstreamError("nope", status=503)), "fake/x")
    assert await extractor.extract(STORED) is None


async def test_heuristic_facts_the_model_missed_are_added_nothing_lost(extractor, mock):
    mock.post(URL).respond(200, json=completion(json.dumps(
        {"facts": [{"key": "name", "value": "张三"}, {"key": "city", "value": "北京市"}]})))
    facts = await extract_facts(STORED, extractor)
    # name/city came from the model; the heuristic's user_name and user_location duplicate
    # them by value and are left out; the contract facts the model missed are added.
    assert [f.key for f in facts] == ["name", "city", "contract_amount", "contract_date"]


async def test_without_user_messages_the_model_is_not_called():
    upstream = HangingUpstream()
    extractor = LlmFactExtractor(upstream, "fake/x", timeout=0.05)
    assert await extractor.extract(chain(None, [Message.of("assistant", "hi")])) == ()
    assert upstream.calls == []
