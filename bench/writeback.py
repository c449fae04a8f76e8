"""Write-back after a store outage: how fast held turns reach the store and are applied.

`python -m bench writeback --out bench/results/writeback.json` (a markdown table beside it).
Real parts: an embedded Valkey in a temporary directory, the gateway's RecordBuffer,
RedisStore and Recorder. Per history length (messages each conversation already holds):
- `flush_turns_per_s`: a RecordBuffer holding `conversations x turns` turns (what replicas
  kept in process during an outage) drains them into the store — one idempotent enqueue each,
  in order;
- `apply_turns_per_s`: then one recorder worker applies the backlog from the stream to the
  transcripts (the consumer-group job: check the order, read the transcript, append, ack);
- both divided by the wall time of their phase. A cost that grew with the conversation would
  show as a lower rate at the longer history.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.machine import machine
from bench.output import write_result
from gateway.core.ids import ConversationKey
from gateway.core.messages import Message
from gateway.core.transcript import TurnRecord
from gateway.pipeline.record_buffer import BufferedTurn, RecordBuffer
from gateway.store import EmbeddedRedis, RedisStore, connect
from gateway.store.recording import Recorder

TEXT = ("I finally repaired the old bicycle my grandfather left me; the chain was rusted "
        "through, so I ordered a new one from the shop near the harbour. ")


def _turn(n: int) -> tuple[Message, Message]:
    return (Message.of("user", f"{TEXT}(turn {n})"),
            Message.of("assistant", f"That sounds rewarding. {TEXT}(reply {n})"))


async def _history(store: RedisStore, recorder: Recorder, keys: list[ConversationKey],
                   messages: int) -> None:
    """Give each conversation `messages` applied messages (one record each, then applied)."""
    if not messages:
        return
    pairs = tuple(m for n in range(messages // 2) for m in _turn(-n - 1))
    for key in keys:
        await store.record(key, TurnRecord("append", None, pairs, created_at=time.time()))
    await recorder.process_available()


async def measure(url: str, conversations: int, turns: int, history: int) -> dict[str, Any]:
    client = connect(url)
    try:
        await client.flushdb()
        store = RedisStore(client)
        recorder = Recorder(client, workers=1, consumer_prefix="bench")
        keys = [ConversationKey("bench", "user", f"c{history}-{c}")
                for c in range(conversations)]
        await _history(store, recorder, keys, history)
        buffer = RecordBuffer(store, capacity=conversations * turns)
        now = time.time()
        for n in range(turns):  # interleaved, as concurrent conversations arrive
            for key in keys:
                record = TurnRecord("append", None, _turn(n), created_at=now + n * 1e-3,
                                    request_id=f"{key.conversation}-{n}")
                buffer.add(BufferedTurn(key, record.request_id, record=record))
        total = conversations * turns
        started = time.perf_counter()
        lost = await buffer.drain(timeout=600)
        flush_s = time.perf_counter() - started
        assert not lost, f"{len(lost)} turns were not flushed"
        started = time.perf_counter()
        applied = await recorder.process_available()
        apply_s = time.perf_counter() - started
        assert applied == total, (applied, total)
        for key in keys[:3]:
            assert len(await store.applied(key)) == history // 2 * 2 + 2 * turns
        return {"history_messages": history, "conversations": conversations,
                "turns": total, "flush_s": round(flush_s, 3),
                "flush_turns_per_s": round(total / flush_s),
                "apply_s": round(apply_s, 3), "apply_turns_per_s": round(total / apply_s)}
    finally:
        await client.aclose()


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = ["# Write-back after an outage", "",
             f"{m['cores']} cores, {m['cpu_model']}, Python {m['python']}", "",
             "| messages already in each conversation | conversations | turns | flush turns/s "
             "| apply turns/s |", "|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['history_messages']} | {r['conversations']} | {r['turns']} | "
              f"{r['flush_turns_per_s']} | {r['apply_turns_per_s']} |" for r in result["rows"]]
    lines += ["", "flush: the record buffer enqueues the turns it held (one idempotent record "
              "script call each, in order); apply: one recorder worker applies the backlog."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/writeback.json"))
    parser.add_argument("--conversations", type=int, default=20)
    parser.add_argument("--turns", type=int, default=100, help="held turns per conversation")
    parser.add_argument("--history", type=int, nargs="+", default=[0, 1000])
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cgwriteback-") as tmp:
        server = EmbeddedRedis(Path(tmp))
        server.start()
        try:
            rows = [asyncio.run(measure(server.url, args.conversations, args.turns, h))
                    for h in args.history]
        finally:
            server.stop()
    result = {"benchmark": "writeback", "machine": machine(), "rows": rows}
    write_result(args.out, result, markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
