"""The console's request history against a real store: what one entry keeps, the bounded
queue, and the chart drawn from entries."""

from __future__ import annotations

import json

from gateway.http.console.chart import spend_chart, token_chart
from gateway.core.ids import ConversationKey
from gateway.ops.observability import RequestLog
from gateway.pipeline.request_history import RequestHistory, entry_of, last_request, recent_requests
from gateway.store.keys import KeySpace

KEYS = KeySpace()


def log(i: int, tenant: str | None = "acme") -> RequestLog:
    return RequestLog(request_id=f"req-{i}", tenant=tenant, user="u1", conversation="c1",
                      model="echo", tokens_original=100 + i, tokens_forwarded=50 + i,
                      memory_blocks=("summary", "recalled"),
                      recalled_items=(("fact", "fact:user_city", 0.61),),
                      memory_error="ConnectionError('the text Quillonville was here')")


def test_an_entry_keeps_ids_and_numbers_and_no_error_text():
    entry = entry_of(log(1), now=1700000000.0)
    assert entry["memory_blocks"] == ["summary", "recalled"]
    assert entry["recalled_items"] == [{"kind": "fact", "id": "fact:user_city", "score": 0.61}]
    assert entry["memory_error"] == "ConnectionError"  # not its message: it may quote text
    assert "Quillonville" not in json.dumps(entry)


async def test_requests_are_written_to_the_tenants_stream_and_the_conversation(redis_client):
    history = RequestHistory(redis_client, KEYS, max_entries=100, last_ttl_seconds=60)
    for i in range(3):
        history.add(log(i))
    history.add(log(9, tenant=None))  # refused before its tenant was known: not kept
    await history.flush()
    assert history.written == 3 and history.dropped == 0
    entries = await recent_requests(redis_client, KEYS, "acme", 10)
    assert [e["request_id"] for e in entries] == ["req-2", "req-1", "req-0"]  # newest first
    last = await last_request(redis_client, KEYS, ConversationKey("acme", "u1", "c1"))
    assert last is not None and last["request_id"] == "req-2"
    assert 0 < await redis_client.ttl(KEYS.last_request(ConversationKey("acme", "u1", "c1"))) <= 60


async def test_a_full_queue_drops_the_oldest_entry_and_counts_it(redis_client):
    history = RequestHistory(redis_client, KEYS, max_entries=100, last_ttl_seconds=60,
                             capacity=2)
    for i in range(3):
        history.add(log(i))
    await history.flush()
    assert history.dropped == 1
    entries = await recent_requests(redis_client, KEYS, "acme", 10)
    assert [e["request_id"] for e in entries] == ["req-2", "req-1"]


async def test_the_background_writer_writes_what_is_queued_and_drains(redis_client):
    history = RequestHistory(redis_client, KEYS, max_entries=100, last_ttl_seconds=60)
    await history.start()
    history.add(log(1))
    await history.drain(5)
    assert [e["request_id"] for e in await recent_requests(redis_client, KEYS, "acme", 10)] \
        == ["req-1"]


def test_the_chart_plots_original_and_forwarded_tokens_oldest_first():
    entries = [{"tokens_original": 200, "tokens_forwarded": 100},  # newest
               {"tokens_original": None, "tokens_forwarded": None},  # refused: not plotted
               {"tokens_original": 100, "tokens_forwarded": 100}]
    chart = token_chart(entries)
    assert chart is not None and chart.requests == 2 and chart.peak == 200
    assert chart.forwarded_percent == round(100 * 200 / 300, 1)
    first, last = chart.forwarded.split()
    assert float(first.split(",")[0]) < float(last.split(",")[0])  # oldest on the left
    assert token_chart([]) is None


def test_the_spend_chart_adds_up_the_priced_requests_oldest_first():
    entries = [{"spend": 0.002, "whole_cost": 0.005},  # newest
               {"spend": None, "whole_cost": None},  # unpriced: not plotted
               {"spend": 0.001, "whole_cost": 0.001}]
    chart = spend_chart(entries)
    assert chart is not None and chart.requests == 2
    assert (chart.spend, chart.whole_cost) == (0.003, 0.006)
    first, last = chart.whole.split()
    assert float(first.split(",")[0]) < float(last.split(",")[0])  # oldest on the left
    assert float(first.split(",")[1]) > float(last.split(",")[1])  # higher up: more spent
    assert spend_chart([{"spend": None, "whole_cost": None}]) is None
