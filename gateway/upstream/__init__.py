"""Upstream adapters: litellm for real models, the built-in fake for `fake/<behaviour>`."""

from __future__ import annotations

from typing import Any, AsyncIterator

from gateway.ports import Upstream, UpstreamCall
from gateway.upstream.fake import FakeUpstream

FAKE_PREFIX = "fake/"


class RoutingUpstream:
    """ports.Upstream: `fake/...` models to the in-process fake, all others to litellm.

    Pass `litellm` (a LitellmUpstream, whose construction imports litellm, ~2–4 s) when the
    config names real models; left out, it is built on the first non-fake call.
    """

    def __init__(self, *, fake: Upstream | None = None, litellm: Upstream | None = None) -> None:
        self._fake = fake or FakeUpstream()
        self._litellm = litellm

    async def complete(self, call: UpstreamCall) -> dict[str, Any]:
        return await self._route(call).complete(call)

    def stream(self, call: UpstreamCall) -> AsyncIterator[dict[str, Any]]:
        return self._route(call).stream(call)

    def _route(self, call: UpstreamCall) -> Upstream:
        if call.model.startswith(FAKE_PREFIX):
            return self._fake
        if self._litellm is None:
            from gateway.upstream.litellm_upstream import LitellmUpstream

            self._litellm = LitellmUpstream()
        return self._litellm


__all__ = ["FAKE_PREFIX", "RoutingUpstream"]
