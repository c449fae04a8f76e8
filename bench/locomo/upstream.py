"""The upstream the benchmark puts behind the gateway: it answers from the script and
records exactly what the gateway forwarded.

Each request carries a tag in the body field `x_bench_turn` (unknown fields pass through the
gateway to `call.body` untouched). `script(tag, reply)` says what to answer to a tag; a tag
with no scripted reply gets "" (probes). `take(tag)` returns the forwarded messages once.
The gateway calls it on its server thread; the harness reads on its own: single dict
operations are atomic under the GIL, and a tag is read only after its response arrived.
"""

from __future__ import annotations

import time
from typing import Any, AsyncIterator

from gateway.ports import UpstreamCall

TAG_FIELD = "x_bench_turn"


class ScriptedUpstream:
    """gateway.ports.Upstream answering scripted replies and recording forwarded messages."""

    def __init__(self) -> None:
        self._replies: dict[str, str] = {}
        self._forwarded: dict[str, list[dict[str, Any]]] = {}

    def script(self, tag: str, reply: str) -> None:
        self._replies[tag] = reply

    def take(self, tag: str) -> list[dict[str, Any]]:
        """The messages forwarded for `tag` (KeyError if the gateway never called upstream)."""
        return self._forwarded.pop(tag)

    def _answer(self, call: UpstreamCall) -> str:
        tag = str(call.body.get(TAG_FIELD, ""))
        self._forwarded[tag] = call.body["messages"]
        return self._replies.pop(tag, "")

    async def complete(self, call: UpstreamCall) -> dict[str, Any]:
        content = self._answer(call)
        return {"id": "chatcmpl-bench", "object": "chat.completion", "created": int(time.time()),
                "model": call.model,
                "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                             "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}

    async def stream(self, call: UpstreamCall) -> AsyncIterator[dict[str, Any]]:
        content = self._answer(call)
        head = {"id": "chatcmpl-bench", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": call.model}
        yield {**head, "choices": [{"index": 0, "delta": {"role": "assistant",
                                                          "content": content},
                                    "finish_reason": None}]}
        yield {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
