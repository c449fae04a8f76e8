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

And end to end through a real outage (`outage` rows), per `recorder.buffer_retry_max_seconds`:
the store is stopped, the turns are held by a started RecordBuffer whose flusher retries with
its backoff, the store comes back after `--outage-seconds`, and one recorder worker applies
concurrently. `resume_s`: from the store answering again to the first turn flushed (the
backoff's wait); `end_to_end_turns_per_s`: the turns divided by the time from the store
answering again to the last turn applied.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from redis.exceptions import RedisError

from bench.machine import machine
from bench.output import write_result
from bench.overhead.processes import stop_children_on_sigterm
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


async def _apply_until(recorder: Recorder, total: int) -> int:
    """Apply backlog as it arrives until `total` turns are applied; outages are waited out."""
    applied = 0
    while applied < total:
        try:
            done = await recorder.process_available()
        except (ConnectionError, OSError, RedisError):
            done = 0
        applied += done
        if not done:
            await asyncio.sleep(0.005)
    return applied


async def measure_outage(server: EmbeddedRedis, conversations: int, turns: int,
                         outage_s: float, retry_max_s: float) -> dict[str, Any]:
    client = connect(server.url)
    try:
        await client.flushdb()
        store = RedisStore(client)
        recorder = Recorder(client, workers=1, consumer_prefix="bench-outage")
        await recorder.process_available()  # the consumer group exists before the outage
        keys = [ConversationKey("bench", "user", f"outage{retry_max_s}-{c}")
                for c in range(conversations)]
        buffer = RecordBuffer(store, capacity=conversations * turns,
                              retry_max_seconds=retry_max_s)
        await buffer.start()
        server.stop()
        now = time.time()
        for n in range(turns):
            for key in keys:
                record = TurnRecord("append", None, _turn(n), created_at=now + n * 1e-3,
                                    request_id=f"{key.conversation}-{n}")
                buffer.add(BufferedTurn(key, record.request_id, record=record))
        total = conversations * turns
        await asyncio.sleep(outage_s)
        await asyncio.to_thread(server.start)
        back = time.perf_counter()
        applying = asyncio.create_task(_apply_until(recorder, total))
        while buffer.flushed == 0:
            await asyncio.sleep(0.001)
        resume_s = time.perf_counter() - back
        applied = await applying
        end_to_end_s = time.perf_counter() - back
        await buffer.stop()
        assert applied == total and buffer.dropped == 0, (applied, total, buffer.dropped)
        for key in keys[:3]:
            assert len(await store.applied(key)) == 2 * turns
        return {"retry_max_seconds": retry_max_s, "outage_s": outage_s,
                "conversations": conversations, "turns": total,
                "resume_s": round(resume_s, 3), "end_to_end_s": round(end_to_end_s, 3),
                "end_to_end_turns_per_s": round(total / end_to_end_s)}
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
    if result.get("outage"):
        lines += ["", "Through a real outage (the store stopped, then back; the buffer's flusher "
                  "and one recorder worker running):", "",
                  "| buffer_retry_max_seconds | outage s | turns | resume s | end-to-end s "
                  "| end-to-end turns/s |", "|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['retry_max_seconds']} | {r['outage_s']} | {r['turns']} | "
                  f"{r['resume_s']} | {r['end_to_end_s']} | {r['end_to_end_turns_per_s']} |"
                  for r in result["outage"]]
        lines += ["", "resume: from the store answering again to the first held turn flushed "
                  "(the flusher's backoff); end to end: until the last turn is applied."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    stop_children_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/writeback.json"))
    parser.add_argument("--conversations", type=int, default=20)
    parser.add_argument("--turns", type=int, default=100, help="held turns per conversation")
    parser.add_argument("--history", type=int, nargs="+", default=[0, 1000])
    parser.add_argument("--outage-seconds", type=float, default=10.0,
                        help="how long the store is down in the outage rows")
    parser.add_argument("--retry-max", type=float, nargs="*", default=[5.0, 1.0],
                        help="recorder.buffer_retry_max_seconds values for the outage rows")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cgwriteback-") as tmp:
        server = EmbeddedRedis(Path(tmp))
        server.start()
        try:
            rows = [asyncio.run(measure(server.url, args.conversations, args.turns, h))
                    for h in args.history]
            outage = [asyncio.run(measure_outage(server, args.conversations, args.turns,
                                                 args.outage_seconds, r))
                      for r in args.retry_max]
        finally:
            server.stop()
    result = {"benchmark": "writeback", "machine": machine(), "rows": rows, "outage": outage}
    write_result(args.out, result, markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
