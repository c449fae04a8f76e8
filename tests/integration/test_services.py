"""What one process of the gateway is built of (`gateway.wiring.open_services`), against a real
store: the parts that read transcripts share one cache of them."""

from __future__ import annotations

from gateway.core.ids import ConversationKey
from gateway.core.messages import Message
from gateway.core.transcript import TurnRecord
from gateway.store import RedisStore, connect
from gateway.store.cluster import key_space
from gateway.upstream.fake import FakeUpstream
from gateway.wiring import open_services
from tests.support.gateway import gateway_config

KEY = ConversationKey("acme", "alice", "conv-1")


def turn(n: int) -> TurnRecord:
    return TurnRecord(mode="append", parent_id=None, created_at=1.0, messages=(
        Message.of("user", f"question {n}"), Message.of("assistant", f"answer {n}")))


async def test_the_recorder_and_the_memory_worker_of_a_process_decode_a_transcript_once(
        redis_url):
    config = gateway_config(redis_url, recorder={"mode": "external"})
    client = connect(redis_url)
    writer = RedisStore(client, key_space(config))
    try:
        async with open_services(config, redis_url, FakeUpstream(),
                                 applies_turns=True) as services:
            assert services.memory is not None and services.recorder is not None
            shared = services.transcripts
            assert services.recorder.transcripts is shared
            for n in range(3):
                await writer.record(KEY, turn(n))
                hits = shared.hits
                await services.recorder.process_available()
                if n:  # the memory worker's load of the turn before left it as it is
                    assert shared.hits == hits + 1
                await services.memory.worker.process_available()
                assert len(shared) == 1
            assert [m.message.text for m in await writer.load(KEY)][-1] == "answer 2"
    finally:
        await client.aclose()
