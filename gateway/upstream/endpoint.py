"""Which calls take the direct path: the OpenAI chat endpoint a litellm model string names.

A call goes direct (gateway/upstream/direct.py) exactly when litellm would send the request
body to an OpenAI chat completions endpoint untouched — litellm's provider `openai`, which
LitellmUpstream already forwards verbatim in `extra_body`. Switching such a call to the direct
path changes nothing the upstream receives. The rule, decided from the model string alone
(litellm is not imported to decide it):

- `openai/<model>` — OpenAI itself (`api_base` unset: https://api.openai.com/v1) and every
  server that speaks the OpenAI chat API under an `api_base`: vLLM (`vllm serve`), Ollama
  (`http://host:11434/v1`), llama.cpp's `llama-server`, LM Studio, Azure OpenAI's v1 API
  (`https://<resource>.openai.azure.com/openai/v1`), the gateway's own fake upstream.
  The upstream is sent `<model>`.
- a bare OpenAI chat model name (`gpt-4o-mini`, `gpt-4.1`, `gpt-5`, `o3-mini`, `chatgpt-4o-latest`,
  `ft:gpt-4o-mini:org::id`) without an `api_base`: OpenAI, as litellm maps it. With an
  `api_base`, litellm may map the name to another provider by that address (api.groq.com is
  `groq`), so such a call stays on litellm; write `openai/<model>` to go direct.

Everything else stays on litellm, which translates for its provider:
- other providers' prefixes: `anthropic/`, `bedrock/`, `vertex_ai/`, `gemini/`, `azure/`
  (deployment URLs, `api-version`, the `api-key` header), `hosted_vllm/` (litellm rewrites
  custom tools, strict schemas and `thinking` for vLLM), `ollama/` and `ollama_chat/`
  (Ollama's native API, not its OpenAI one), `groq/`, ...;
- a route with `litellm_params` (api_version, organization, ...): the direct path does not
  read them, so it must not take a call that needs them;
- OpenAI models that only exist on the Responses API (`o1-pro`, `gpt-5-pro`, `*codex*`,
  `*deep-research*`, ...), which litellm bridges there, and the ones litellm sends to the
  text completions API (`ft:davinci-002:...`, `ft:babbage-002:...`, bare `*-instruct`; an
  `openai/...-instruct` model, say a vLLM-served Llama, is chat and goes direct).
  The patterns err towards litellm: a name wrongly kept on litellm costs speed, never
  behaviour. tests/integration/test_upstream_routing.py checks the rule against
  litellm's own model map, so a litellm upgrade that disagrees fails a test.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from gateway.core.context.cache_hints import CacheHint

OPENAI_API_BASE = "https://api.openai.com/v1"
"""litellm's default for the `openai` provider."""

_OPENAI_PREFIX = "openai/"
_BARE_OPENAI_CHAT = re.compile(r"(gpt-|chatgpt-|o[1-9](-|$)|ft:gpt-)")
# Bridged to the Responses API or sent to text completions by litellm (see the docstring).
_NOT_CHAT_COMPLETIONS = re.compile(r"-pro(-|$)|codex|deep-research|daybreak|ft:(babbage|davinci)-")
_BARE_TEXT_COMPLETION = re.compile(r"instruct")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a direct call goes, and the model name the upstream knows."""

    url: str
    """`{api_base}/chat/completions` (`{api_base}/v1/messages` for `anthropic_endpoint`)."""
    model: str


def openai_endpoint(model: str, api_base: str | None,
                    litellm_params: Mapping[str, Any] | None = None) -> Endpoint | None:
    """The OpenAI chat endpoint this route forwards to verbatim, or None: litellm's call."""
    if litellm_params:
        return None
    if model.startswith(_OPENAI_PREFIX):
        name = model[len(_OPENAI_PREFIX):]
    elif (api_base is None and "/" not in model and _BARE_OPENAI_CHAT.match(model)
          and not _BARE_TEXT_COMPLETION.search(model)):
        name = model
    else:
        return None
    if not name or _NOT_CHAT_COMPLETIONS.search(name):
        return None
    return Endpoint((api_base or OPENAI_API_BASE).rstrip("/") + "/chat/completions", name)


ANTHROPIC_API_BASE = "https://api.anthropic.com"
"""litellm's default for the `anthropic` provider."""
_ANTHROPIC_PREFIX = "anthropic/"


def anthropic_endpoint(model: str, api_base: str | None,
                       litellm_params: Mapping[str, Any] | None = None) -> Endpoint | None:
    """The Messages API endpoint an `anthropic/<model>` route names, where an Anthropic-dialect
    request goes direct (gateway/upstream/direct_anthropic.py), or None. As litellm builds it:
    `{api_base}/v1/messages` (an api_base already ending so is taken as it is). A route with
    `litellm_params` stays on litellm, as on the OpenAI direct path."""
    if litellm_params or not model.startswith(_ANTHROPIC_PREFIX):
        return None
    name = model[len(_ANTHROPIC_PREFIX):]
    if not name:
        return None
    base = (api_base or ANTHROPIC_API_BASE).rstrip("/")
    return Endpoint(base if base.endswith("/v1/messages") else base + "/v1/messages", name)


def cache_hint(model: str, api_base: str | None, litellm_params: Mapping[str, Any] | None,
               setting: bool | None) -> CacheHint | None:
    """Which prompt-cache hint a route gets (gateway/core/context/cache_hints.py), or None.

    `setting` (the route's `cache_hints`): false, none; true, `cache_control` for Claude models
    (`anthropic/`, or "claude" in the name: Bedrock, Vertex) and `prompt_cache_key` for every
    other; null, only where the provider takes them — `anthropic/` models (litellm passes
    `cache_control` on) and OpenAI's own API (no `api_base`, or api.openai.com)."""
    if setting is False or model.startswith("fake/"):
        return None
    claude = model.startswith("anthropic/") or "claude" in model.lower()
    if setting:
        return "cache_control" if claude else "prompt_cache_key"
    if model.startswith("anthropic/"):
        return "cache_control"
    endpoint = openai_endpoint(model, api_base, litellm_params)
    if endpoint is not None and endpoint.url.startswith(OPENAI_API_BASE + "/"):
        return "prompt_cache_key"
    return None
