"""SIGTERM: stop accepting, finish in-flight streams, drain the recorder, leave the group, exit.

Real gateway processes on a real redis-server.
"""

from __future__ import annotations

import asyncio
import signal
import time

import httpx

from tests.support.processes import (AUTH, Processes, chat_body, consumers,
                                     gateway_config_file, report, transcripts, turn_text,
                                     wait_all_applied)

STREAMS = 4


def test_sigterm_finishes_in_flight_streams_records_them_and_exits(tmp_path):
    with Processes(tmp_path) as procs:
        redis = procs.redis()
        config = gateway_config_file(tmp_path / "config.yaml", redis.url,
                                     models={"stream-slow": {"model": "fake/slow-2000"}},
                                     server={"shutdown_timeout_seconds": 10})
        gateway = procs.gateway(config)
        names = [f"term-{i}" for i in range(STREAMS)]

        async def scenario() -> tuple[list[bytes], str, float]:
            async with httpx.AsyncClient(timeout=20) as client:
                first_bytes = [asyncio.Event() for _ in names]

                async def stream(i: int) -> bytes:
                    body = chat_body(names[i], 0, model="stream-slow", stream=True)
                    async with client.stream("POST", gateway.url + "/v1/chat/completions",
                                             json=body, headers={
                                                 **AUTH, "X-Conversation-Id": names[i]}) as r:
                        chunks = []
                        async for chunk in r.aiter_bytes():
                            chunks.append(chunk)
                            first_bytes[i].set()
                        return b"".join(chunks)

                streams = [asyncio.create_task(stream(i)) for i in range(STREAMS)]
                await asyncio.wait_for(asyncio.gather(*(e.wait() for e in first_bytes)), 10)
                gateway.proc.send_signal(signal.SIGTERM)
                signalled = time.monotonic()
                # New connections are refused soon after the signal (bounded poll).
                refused = "accepted"
                while time.monotonic() - signalled < 1.5:
                    try:
                        await client.get(gateway.url + "/healthz", timeout=0.5)
                    except httpx.ConnectError:
                        refused = "refused"
                        break
                    await asyncio.sleep(0.05)
                bodies = await asyncio.wait_for(asyncio.gather(*streams), 15)
                return bodies, refused, signalled

        bodies, refused, signalled = asyncio.run(scenario())
        code = gateway.proc.wait(20)
        exit_s = time.monotonic() - signalled
        log = gateway.log_text()
        wait_all_applied(redis.url, names, timeout=10)
        stored = transcripts(redis.url, names)
        complete = sum(1 for name in names if len(stored[name]) == 2
                       and stored[name][1].message.text == turn_text(name, 0)
                       and not stored[name][1].incomplete)
        report("graceful shutdown (SIGTERM with 4 streams in flight)",
               streams_finished=sum(b.rstrip().endswith(b"data: [DONE]") for b in bodies),
               turns_stored_complete=complete, new_connections=refused,
               exit_code=code, exit_s=f"{exit_s:.1f}",
               consumers_left=len(consumers(redis.url)))
        assert all(b.rstrip().endswith(b"data: [DONE]") for b in bodies)
        assert refused == "refused"
        assert complete == STREAMS
        assert code in (0, -signal.SIGTERM)  # uvicorn re-raises the signal it handled
        assert '"event": "shutdown_complete"' in log and "shutdown failed" not in log
        assert consumers(redis.url) == []  # it left the consumer group


def test_sigterm_with_redis_already_gone_shuts_down_cleanly_and_says_what_was_lost(tmp_path):
    with Processes(tmp_path) as procs:
        redis = procs.redis()
        config = gateway_config_file(tmp_path / "config.yaml", redis.url,
                                     recorder={"drain_timeout_seconds": 1})
        gateway = procs.gateway(config)
        redis.stop()
        response = httpx.post(gateway.url + "/v1/chat/completions", timeout=20,
                              json=chat_body("gone-0", 0),
                              headers={**AUTH, "X-Conversation-Id": "gone-0"})
        started = time.monotonic()
        code = gateway.terminate(20)
        log = gateway.log_text()
        report("shutdown with redis gone", request_status=response.status_code,
               exit_code=code, exit_s=f"{time.monotonic() - started:.1f}",
               lost_logged=log.count('"event": "record_buffer_lost_at_shutdown"'))
        assert response.status_code == 200
        assert code in (0, -signal.SIGTERM)
        assert "Application shutdown failed" not in log
        assert '"event": "shutdown_complete"' in log
        assert '"event": "record_buffer_lost_at_shutdown"' in log
