"""The record journal: turns spilled at shutdown are read back exactly, a torn line is skipped,
journals are claimed once and only from processes that are gone, and a replayed turn created
before its user's erase is refused by the store.

The process-level scenario (redis down, SIGTERM, restart) is in tests/e2e/test_graceful_shutdown.py.
"""

from __future__ import annotations

import asyncio
import os
import stat
import time
from pathlib import Path

import httpx

from gateway.core.ids import ConversationKey
from gateway.core.messages import Message
from gateway.core.transcript import TurnRecord
from gateway.pipeline.record_buffer import BufferedTurn
from gateway.pipeline.record_journal import (RecordJournal, decode_turn, encode_turn, owner_alive,
                                    process_identity)
from gateway.store import connect
from gateway.store.redis_store import RedisStore
from tests.support.gateway import KEYS, gateway_config, running_gateway

KEY = ConversationKey("acme", "alice", "journalled")
GONE = "4194999-1"
"""A writer that is not running: the pid is above Linux's largest (2^22)."""
ALSO_GONE = "4194998-1"


def _record_turn(text: str, created_at: float, key: ConversationKey = KEY) -> BufferedTurn:
    return BufferedTurn(key, f"req-{text}", record=TurnRecord(
        "append", None, (Message.of("user", text), Message.of("assistant", text)),
        created_at=created_at, request_id=f"req-{text}"))


def _incoming_turn(text: str, created_at: float, key: ConversationKey = KEY) -> BufferedTurn:
    return BufferedTurn(key, f"req-{text}", incoming=(Message.of("user", text),),
                        reply=(Message.of("assistant", text),), created_at=created_at)


def test_a_turn_is_read_back_exactly_as_it_was_buffered():
    tool_call = {"id": "call_1", "type": "function",
                 "function": {"name": "lookup", "arguments": "{\"q\": \"北京\\n\"}"}}
    turns = [
        BufferedTurn(KEY, "req-1", record=TurnRecord(
            "after", "parent-id", (Message.of("user", [{"type": "text", "text": "a\nb"}]),
                                   Message.of("assistant", None, tool_calls=[tool_call])),
            created_at=1795444441.123456, request_id="req-1", incomplete_reply=True)),
        BufferedTurn(KEY, "req-2", incoming=(Message.of("user", "多行\n文本 \u2028"),),
                     reply=(Message.of("assistant", "partial"),), created_at=12.5,
                     incomplete_reply=True),
        BufferedTurn(KEY, "req-3", incoming=(Message.of("user", "no reply"),), created_at=1.0),
    ]
    for turn in turns:
        line = encode_turn(turn)
        assert "\n" not in line
        assert decode_turn(line) == turn


def test_spill_is_one_private_line_per_turn_and_a_torn_line_is_skipped(tmp_path):
    writer = RecordJournal(tmp_path, owner=GONE)
    writer.spill([_record_turn(f"t{i}", 10.0 + i) for i in range(3)])
    assert stat.S_IMODE(writer.path.stat().st_mode) == 0o600
    assert len(writer.path.read_text().splitlines()) == 3
    with open(writer.path, "r+b") as file:  # the process died writing its last line
        file.truncate(writer.path.stat().st_size - 25)

    reader = RecordJournal(tmp_path)
    turns = reader.claim()
    assert [t.request_id for t in turns] == ["req-t0", "req-t1"]
    assert reader.skipped == 1
    assert not writer.path.exists()  # claimed: renamed to the reader's name


def test_a_journal_is_claimed_once_and_never_from_a_running_process(tmp_path):
    me = process_identity(os.getpid())
    assert me is not None and owner_alive(me) and not owner_alive(GONE)
    RecordJournal(tmp_path, owner=me).spill([_record_turn("mine", 1.0)])
    RecordJournal(tmp_path, owner=GONE).spill([_record_turn("gone", 2.0)])

    first, second = RecordJournal(tmp_path), RecordJournal(tmp_path)
    assert [t.request_id for t in first.claim()] == ["req-gone"]
    assert second.claim() == []  # claimed by a process that runs (this one)
    # A claimer that is gone (killed mid-replay): its claim is taken over at the next start.
    claimed = next(tmp_path.glob("*.replay-*"))
    claimed.rename(claimed.with_name(claimed.name.rpartition(".replay-")[0]
                                     + f".replay-{ALSO_GONE}"))
    third = RecordJournal(tmp_path)
    assert [t.request_id for t in third.claim()] == ["req-gone"]
    third.release()
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"record-journal-{me}.jsonl"]


def test_several_journals_interleave_by_creation_time_keeping_each_ones_order(tmp_path):
    RecordJournal(tmp_path, owner=GONE).spill(
        [_record_turn("a1", 1.0), _incoming_turn("a3", 3.0), _record_turn("a4", 4.0)])
    RecordJournal(tmp_path, owner=ALSO_GONE).spill(
        [_incoming_turn("b2", 2.0), _record_turn("b5", 5.0)])
    turns = RecordJournal(tmp_path).claim()
    assert [t.request_id for t in turns] == ["req-a1", "req-b2", "req-a3", "req-a4", "req-b5"]


def test_a_replayed_turn_from_before_its_users_erase_is_refused_by_the_store(redis_url,
                                                                             tmp_path):
    data_dir = tmp_path / "data"
    config = gateway_config(redis_url, recorder={"mode": "background"},
                            server={"data_dir": str(data_dir)})
    before = time.time() - 60
    with running_gateway(config) as url:
        response = httpx.delete(url + "/v1/memory", timeout=30, headers={
            "Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": "alice"})
        assert response.status_code == 200, response.text
    after = time.time() + 1
    bob = ConversationKey("acme", "bob", "journalled")
    RecordJournal(data_dir, owner=GONE).spill([
        _record_turn("alice-before", before), _incoming_turn("alice-before-2", before + 1),
        _record_turn("bob-before", before, key=bob), _incoming_turn("alice-after", after)])

    with running_gateway(config):  # replays the journal at start
        deadline = time.monotonic() + 20
        while list(data_dir.glob("record-journal-*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(data_dir.glob("record-journal-*")) == []  # every turn left the buffer

        async def stored() -> tuple[list[str], list[str]]:
            client = connect(redis_url)
            try:
                store = RedisStore(client)
                return ([m.message.text for m in await store.load(KEY)],
                        [m.message.text for m in await store.load(bob)])
            finally:
                await client.aclose()

        alice, bobs = asyncio.run(stored())
    assert alice == ["alice-after", "alice-after"]
    assert bobs == ["bob-before", "bob-before"]


def test_nothing_to_spill_writes_no_file(tmp_path):
    journal = RecordJournal(tmp_path)
    journal.spill([])
    assert list(Path(tmp_path).iterdir()) == []
