"""What usage and spend bookkeeping costs a request, each step timed alone (CPU, in process).

`python -m bench usage-overhead [--iterations 20000]`

The steps the request path gained (docs/operating.md#usage-and-spend): reading the upstream's
`usage` and pricing it beside the whole history's estimate (`pipeline.chat.account`'s work),
the counters' extra bytes in the recorded turn's payload, the provider cache hints on a
101-message body, and, per streamed chunk, the `"usage": null` taken out for a client that did
not ask for the usage. The counters themselves are added by the recorder, off the request
path, in the transaction that applies the turn: no store call of their own. The whole request,
before and after, is measured by `python -m bench overhead` (bench/results/usage-overhead.md).
"""

from __future__ import annotations

import argparse
import json
import timeit
from typing import Any, Callable

from bench.machine import machine
from gateway.core.context.cache_hints import with_cache_hint
from gateway.core.ids import ConversationKey
from gateway.core.spend import Price, money, read_usage, turn_usage
from gateway.pipeline.streams import ChatEncoder
from gateway.ports import RawChunk

USAGE = {"prompt_tokens": 1500, "completion_tokens": 40, "total_tokens": 1540,
         "prompt_tokens_details": {"cached_tokens": 1280, "audio_tokens": 0},
         "completion_tokens_details": {"reasoning_tokens": 0}}
PRICE = Price.per_million(2.5, 10, cached_input=1.25)


def steps() -> list[tuple[str, Callable[[], Any]]]:
    def account() -> Any:
        counted = turn_usage(read_usage(USAGE), PRICE, 7034, 5915)
        return money(counted.spend), money(counted.whole_cost), counted

    counted = account()[2]
    key = ConversationKey("acme", "alice", "c1")
    body = {"model": "m", "messages": [{"role": "system", "content": "Be brief."}]
            + [{"role": "user", "content": f"message {i}"} for i in range(100)]}
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}],
             "usage": None}
    raw = RawChunk(chunk, json.dumps(chunk, separators=(",", ":")).encode())
    encoder = ChatEncoder(strip_usage=True)
    return [
        ("usage read, priced, whole history estimated", account),
        ("the counters in the recorded turn (to_dict + JSON)",
         lambda: json.dumps(counted.to_dict())),
        ("prompt_cache_key on a 101-message body",
         lambda: with_cache_hint(body, "prompt_cache_key", key)),
        ("cache_control breakpoint on a 101-message body",
         lambda: with_cache_hint(body, "cache_control", key)),
        ("a streamed chunk's `\"usage\":null` taken out", lambda: encoder.chunk(raw)),
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench usage-overhead")
    parser.add_argument("--iterations", type=int, default=20_000)
    args = parser.parse_args(argv)
    host = machine()
    lines = [f"`python -m bench usage-overhead --iterations {args.iterations}`: "
             f"{host['cores']} cores, {host['cpu_model']}, Python {host['python']}.",
             "", "| step | µs per call (best of 5) |", "|---|---:|"]
    for name, step in steps():
        best = min(timeit.repeat(step, number=args.iterations, repeat=5)) / args.iterations
        lines.append(f"| {name} | {best * 1e6:.2f} |")
    print("\n".join(lines))
    return 0
