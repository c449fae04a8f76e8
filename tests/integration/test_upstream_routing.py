"""Which calls take the direct path, checked against litellm's own model map; litellm is not
even imported when no configured model needs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.ports import NativeRequest, UpstreamCall
from gateway.upstream.direct import DirectUpstream
from gateway.upstream.direct_anthropic import DirectAnthropic
from gateway.upstream import RoutingUpstream
from gateway.upstream.endpoint import Endpoint, anthropic_endpoint, openai_endpoint
from gateway.upstream.fake_server import create_fake_app
from tests.support.servers import serve

ROOT = Path(__file__).resolve().parents[2]
OPENAI = "https://api.openai.com/v1/chat/completions"


@pytest.mark.parametrize("model, api_base, params, expected", [
    # litellm's `openai` provider: the body goes to the endpoint verbatim
    ("openai/gpt-4o-mini", None, {}, Endpoint(OPENAI, "gpt-4o-mini")),
    ("openai/gpt-4o-mini", "http://x.test/v1/", {}, Endpoint("http://x.test/v1/chat/completions",
                                                              "gpt-4o-mini")),
    ("openai/meta-llama/Llama-3.1-8B-Instruct", "http://vllm.test/v1", {},
     Endpoint("http://vllm.test/v1/chat/completions", "meta-llama/Llama-3.1-8B-Instruct")),
    ("openai/llama3.1:8b-instruct", "http://ollama.test:11434/v1", {},
     Endpoint("http://ollama.test:11434/v1/chat/completions", "llama3.1:8b-instruct")),
    ("gpt-4o-mini", None, {}, Endpoint(OPENAI, "gpt-4o-mini")),
    ("gpt-5", None, {}, Endpoint(OPENAI, "gpt-5")),
    ("o3-mini", None, {}, Endpoint(OPENAI, "o3-mini")),
    ("chatgpt-4o-latest", None, {}, Endpoint(OPENAI, "chatgpt-4o-latest")),
    ("ft:gpt-4o-mini:acme::abc123", None, {}, Endpoint(OPENAI, "ft:gpt-4o-mini:acme::abc123")),
    # litellm's call
    ("gpt-4o-mini", "https://api.groq.com/openai/v1", {}, None),  # litellm maps it to groq
    ("openai/gpt-4o-mini", None, {"organization": "org-1"}, None),
    ("azure/my-deployment", "https://r.openai.azure.com", {"api_version": "2024-10-21"}, None),
    ("anthropic/claude-3-5-sonnet-latest", None, {}, None),
    ("claude-3-5-sonnet-latest", None, {}, None),
    ("hosted_vllm/my-model", "http://vllm.test/v1", {}, None),
    ("ollama_chat/llama3", None, {}, None),
    ("ollama/llama3", None, {}, None),
    ("bedrock/anthropic.claude-3-haiku", None, {}, None),
    ("gpt-3.5-turbo-instruct", None, {}, None),  # text completions
    ("openai/ft:davinci-002:acme::x", None, {}, None),
    ("o1-pro", None, {}, None),  # Responses API only
    ("openai/gpt-5-codex", None, {}, None),
    ("openai/", None, {}, None),
    ("my-model", "http://local.test/v1", {}, None),  # litellm names no provider for it
])
def test_direct_path_rule(model, api_base, params, expected):
    assert openai_endpoint(model, api_base, params) == expected


def test_the_rule_never_sends_direct_what_litellm_would_translate():
    import litellm

    litellm.suppress_debug_info = True
    for name, info in litellm.model_cost.items():
        mode = info.get("mode")
        if "/" not in name and openai_endpoint(name, None) is not None:
            # litellm's acompletion sends any `openai` model but a Responses-only one to chat
            # completions, the body verbatim (an image model's refusal comes from OpenAI).
            provider = litellm.get_llm_provider(name)[1]
            assert provider == "openai" and mode != "responses", (name, provider, mode)
        if info.get("litellm_provider") == "openai" and mode == "responses":
            bare = name.removeprefix("openai/")
            assert openai_endpoint(bare, None) is None, name
            assert openai_endpoint("openai/" + bare, None) is None, name
    # and the usual chat models do go direct
    chat = [n for n, i in litellm.model_cost.items() if "/" not in n and i.get("mode") == "chat"
            and i.get("litellm_provider") == "openai" and n.startswith(("gpt-4", "gpt-5", "o3"))]
    assert len(chat) > 20
    assert all(openai_endpoint(n, None) is not None for n in chat
               if not any(p in n for p in ("-pro", "codex", "deep-research"))), chat


class Recording:
    """ports.Upstream that records which calls it was given."""

    def __init__(self) -> None:
        self.models: list[str] = []

    async def complete(self, call: UpstreamCall) -> dict:
        self.models.append(call.model)
        return {}

    async def stream(self, call: UpstreamCall):
        self.models.append(call.model)
        yield {}


async def test_routing_sends_openai_compatible_calls_direct_and_the_rest_to_litellm():
    direct, litellm = Recording(), Recording()
    upstream = RoutingUpstream(direct=direct, litellm=litellm)
    calls = [UpstreamCall("openai/m", {}, api_base="http://x.test/v1"), UpstreamCall("gpt-4o", {}),
             UpstreamCall("openai/m", {}, extra={"organization": "o"}),
             UpstreamCall("anthropic/claude-3-5-haiku-latest", {}), UpstreamCall("fake/echo", {})]
    for call in calls:
        await upstream.complete(call)
    [_ async for _ in upstream.stream(UpstreamCall("openai/s", {}, api_base="http://x.test"))]
    assert direct.models == ["openai/m", "gpt-4o", "openai/s"]
    assert litellm.models == ["openai/m", "anthropic/claude-3-5-haiku-latest"]


_NO_LITELLM = """
import json, sys
import httpx
from tests.support.gateway import KEYS, gateway_config, running_gateway
from gateway.wiring import routing_upstream

store, base = sys.argv[1], sys.argv[2]
models = {"fast": {"model": "openai/echo", "api_base": base}}
seen = {}
with running_gateway(gateway_config(store, models=models)) as url:
    for model in ("fast", "echo"):
        response = httpx.post(url + "/v1/chat/completions", timeout=30,
                              headers={"Authorization": "Bearer " + KEYS["acme"]},
                              json={"model": model, "stream": model == "fast",
                                    "messages": [{"role": "user", "content": "hi"}]})
        seen[model] = response.status_code
seen["litellm_after_serving"] = "litellm" in sys.modules
routing_upstream(gateway_config(store, models={"c": {"model": "anthropic/claude-3-5-haiku"}}))
seen["litellm_after_anthropic"] = "litellm" in sys.modules
print(json.dumps(seen))
"""


def test_litellm_is_not_imported_when_no_model_needs_it(redis_url):
    with serve(create_fake_app()) as fake:
        done = subprocess.run([sys.executable, "-c", _NO_LITELLM, redis_url, fake + "/v1"],
                              check=False, cwd=ROOT, capture_output=True, text=True,
                              timeout=120,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "fast": 200, "echo": 200, "litellm_after_serving": False,
        "litellm_after_anthropic": True}


def test_the_provider_list_read_without_importing_litellm_is_litellms():
    import litellm

    from gateway.upstream.providers import litellm_providers

    assert litellm_providers() == set(litellm.provider_list)


@pytest.mark.parametrize("api_base, url", [
    (None, "https://api.anthropic.com/v1/messages"),
    ("http://127.0.0.1:9000/", "http://127.0.0.1:9000/v1/messages"),
    ("https://proxy.test/v1/messages", "https://proxy.test/v1/messages")])
def test_anthropic_direct_path_rule(api_base, url):
    assert anthropic_endpoint("anthropic/claude-x", api_base) == Endpoint(url, "claude-x")
    assert anthropic_endpoint("anthropic/claude-x", api_base, {"max_retries": 0}) is None
    assert anthropic_endpoint("bedrock/claude-x", api_base) is None


def test_only_an_anthropic_request_to_an_anthropic_route_goes_direct():
    litellm = Recording()
    upstream = RoutingUpstream(direct=DirectUpstream(), litellm=litellm)
    native = NativeRequest("anthropic", {"model": "c", "max_tokens": 5, "messages": []})
    assert isinstance(upstream._route(UpstreamCall("anthropic/c", {}, native=native)),
                      DirectAnthropic)
    for call in (UpstreamCall("anthropic/c", {}),  # another door: litellm translates
                 UpstreamCall("anthropic/c", {}, native=native, extra={"max_retries": 0}),
                 UpstreamCall("bedrock/c", {}, native=native)):
        assert upstream._route(call) is litellm
