"""The upstream the benchmark puts behind the gateway: it answers what the request asks it to
and hands back exactly what the gateway forwarded. It keeps no state, so the gateway (and it)
can run in another process than the harness.

Each request carries the scripted reply in the body field `x_bench_reply` (unknown fields pass
through the gateway to `call.body` untouched); a probe carries none and gets "". The answer
holds the forwarded messages in the extra field `x_bench_forwarded` (the gateway returns the
upstream's answer to the client unchanged).
"""

from __future__ import annotations

import time
from typing import Any, AsyncIterator

from gateway.ports import UpstreamCall

REPLY_FIELD = "x_bench_reply"
FORWARDED_FIELD = "x_bench_forwarded"


class EchoUpstream:
    """gateway.ports.Upstream answering the requested reply, echoing the forwarded messages."""

    async def complete(self, call: UpstreamCall) -> dict[str, Any]:
        content = str(call.body.get(REPLY_FIELD, ""))
        return {"id": "chatcmpl-bench", "object": "chat.completion", "created": int(time.time()),
                "model": call.model,
                "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                             "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
                FORWARDED_FIELD: call.body["messages"]}

    async def stream(self, call: UpstreamCall) -> AsyncIterator[dict[str, Any]]:
        content = str(call.body.get(REPLY_FIELD, ""))
        head = {"id": "chatcmpl-bench", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": call.model}
        yield {**head, "choices": [{"index": 0, "delta": {"role": "assistant",
                                                          "content": content},
                                    "finish_reason": None}]}
        yield {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
