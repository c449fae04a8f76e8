"""Which provider a model route names, checked against litellm's own list without importing
litellm (its import takes seconds and reads its cost map): the list is read from the source of
the installed litellm, its `LlmProviders` enum (tests/integration/test_upstream_routing.py
compares it with `litellm.provider_list`, so a litellm upgrade that moves it fails a test).

A route's model string is `<provider>/<model>` (`openai/gpt-4o-mini`, `anthropic/claude-...`)
or a bare model name litellm maps itself (`gpt-4o-mini`); `fake/<behaviour>` is the gateway's
own fake upstream. A typo in the provider (`opnai/gpt-4o-mini`) would otherwise pass the
config check and fail only at a request, with litellm's text in a 400.
"""

from __future__ import annotations

import difflib
import importlib.util
import re
from pathlib import Path
from typing import Any, Mapping

FAKE_PROVIDER = "fake"
_MEMBER = re.compile(r'^\s+[A-Z0-9_]+\s*=\s*"([^"]+)"', re.M)


def litellm_providers() -> frozenset[str]:
    """The provider names of the installed litellm (empty if it cannot be read)."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    source = Path(next(iter(spec.submodule_search_locations)), "types", "utils.py")
    try:
        text = source.read_text(encoding="utf-8")
        start = text.index("class LlmProviders")
    except (OSError, ValueError):
        return frozenset()
    end = text.find("\nclass ", start + 1)
    return frozenset(_MEMBER.findall(text[start:end if end > 0 else None]))


def provider_problem(model: str, litellm_params: Mapping[str, Any],
                     providers: frozenset[str]) -> str | None:
    """What is wrong with the provider `model` names, or None (also when `providers` is
    empty: nothing to check against)."""
    if "/" not in model or not providers or litellm_params.get("custom_llm_provider"):
        return None  # a bare name: litellm maps it (or the route names its provider)
    prefix = model.split("/", 1)[0]
    if prefix == FAKE_PROVIDER or prefix in providers:
        return None
    close = difflib.get_close_matches(prefix, sorted(providers), n=1, cutoff=0.6)
    hint = f"; did you mean `{close[0]}`?" if close else \
        "; write `<provider>/<model>` with a provider litellm knows (openai, anthropic, ...)"
    return f"`{prefix}` in `{model}` is not a provider litellm knows{hint}"
