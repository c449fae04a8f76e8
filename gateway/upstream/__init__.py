"""Upstream adapters: the built-in fake for `fake/<behaviour>`, a direct HTTP client for
OpenAI-compatible endpoints and for Anthropic-dialect requests to `anthropic/` routes
(same-dialect pass-through; the rules: gateway/upstream/endpoint.py), litellm for the rest.
They implement `gateway.ports.Upstream`; the wiring builds them (gateway/wiring.py) and the
pipeline and memory jobs call them through the port. They import only ports and errors."""

from __future__ import annotations

from typing import Any, AsyncIterator

from gateway.ports import StreamChunk, Upstream, UpstreamCall
from gateway.upstream.endpoint import anthropic_endpoint, openai_endpoint
from gateway.upstream.fake import FakeUpstream

FAKE_PREFIX = "fake/"


class RoutingUpstream:
    """ports.Upstream: `fake/...` models to the in-process fake, OpenAI-compatible endpoints
    to `direct` (a DirectUpstream), a call carrying the client's Anthropic request to an
    `anthropic/` route to the Anthropic direct path over the same pool, all others to litellm.

    Without `direct`, OpenAI-compatible calls go to litellm too, which sends them the same
    body. Pass `litellm` (a LitellmUpstream, whose construction imports litellm: seconds,
    docs/decisions.md, "litellm and tokenizers are built once") when the config names
    models that need it; left out, it is built on the first such call.
    """

    def __init__(self, *, fake: Upstream | None = None, direct: Upstream | None = None,
                 litellm: Upstream | None = None) -> None:
        self._fake = fake or FakeUpstream()
        self._direct = direct
        self._litellm = litellm
        self._anthropic: Upstream | None = None
        if direct is not None:
            from gateway.upstream.direct import DirectUpstream
            from gateway.upstream.direct_anthropic import DirectAnthropic

            if isinstance(direct, DirectUpstream):
                self._anthropic = DirectAnthropic(direct)

    async def complete(self, call: UpstreamCall) -> dict[str, Any]:
        return await self._route(call).complete(call)

    def stream(self, call: UpstreamCall) -> AsyncIterator[StreamChunk]:
        return self._route(call).stream(call)

    async def aclose(self) -> None:
        """Close the direct path's connection pool (litellm keeps its clients to itself)."""
        close = getattr(self._direct, "aclose", None)
        if close is not None:
            await close()

    def _route(self, call: UpstreamCall) -> Upstream:
        if call.model.startswith(FAKE_PREFIX):
            return self._fake
        if self._direct is not None and openai_endpoint(call.model, call.api_base,
                                                        call.extra) is not None:
            return self._direct
        if self._anthropic is not None and call.native is not None \
                and call.native.dialect == "anthropic" \
                and anthropic_endpoint(call.model, call.api_base, call.extra) is not None:
            return self._anthropic
        if self._litellm is None:
            from gateway.upstream.litellm_upstream import LitellmUpstream

            self._litellm = LitellmUpstream()
        return self._litellm


__all__ = ["FAKE_PREFIX", "RoutingUpstream"]
