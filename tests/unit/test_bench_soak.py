"""The soak's clients (bench/soak/traffic.py): each door's wire form, stateless clients resend
the growing history, stateful ones send only the new message (a Responses chain by the last
answer's id), a conversation ends after its turns, and an incomplete answer is not kept."""

from __future__ import annotations

import json
from pathlib import Path

from bench.soak.cli import UPSTREAM_KEY_ENV, gateway_config, markdown, summarise
from bench.soak.drive import Tally
from bench.soak.traffic import Client, clients
from gateway.config.loader import parse_config


def client(door: str, stateful: bool, turns: int = 3) -> Client:
    return Client(0, "acme", "key", "acme-user-0", door, stateful, turns, stream_every=0)


def answer(door: str, text: str, response_id: str = "resp_1") -> bytes:
    if door == "chat":
        return json.dumps({"choices": [{"message": {"content": text}}]}).encode()
    if door == "anthropic":
        return json.dumps({"content": [{"type": "text", "text": text}]}).encode()
    return json.dumps({"id": response_id, "output": [
        {"type": "message", "content": [{"type": "output_text", "text": text}]}]}).encode()


def test_a_stateless_client_resends_its_whole_history_in_its_doors_form():
    for door, field in (("chat", "messages"), ("anthropic", "messages"), ("responses", "input")):
        c = client(door, stateful=False)
        first, headers, _ = c.next_request()
        assert c.read_answer(answer(door, "noted"), stream=False)
        second, _, _ = c.next_request()
        turns = [m for m in second[field] if m["role"] != "system"]
        assert [m["role"] for m in turns] == ["user", "assistant", "user"]
        assert turns[1]["content"] == "noted"
        assert headers["X-Conversation-Id"] == "soak-0-0"
        assert ("max_tokens" in first) == (door == "anthropic")


def test_a_stateful_client_sends_only_the_new_message_and_a_chain_goes_on_by_its_id():
    c = client("chat", stateful=True)
    c.next_request()
    c.read_answer(answer("chat", "ok"), stream=False)
    body, headers, _ = c.next_request()
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    r = client("responses", stateful=True)
    first, headers, _ = r.next_request()
    assert "previous_response_id" not in first and "X-Conversation-Id" not in headers
    r.read_answer(answer("responses", "ok", "resp_42"), stream=False)
    second, _, stream = r.next_request()
    assert second["previous_response_id"] == "resp_42" and len(second["input"]) == 1
    assert stream is False


def test_a_conversation_ends_after_its_turns_and_the_next_starts_empty():
    c = client("anthropic", stateful=False, turns=2)
    for _ in range(2):
        c.next_request()
        c.read_answer(answer("anthropic", "ok"), stream=False)
    body, headers, _ = c.next_request()
    assert headers["X-Conversation-Id"] == "soak-0-1" and len(body["messages"]) == 1


def test_an_incomplete_answer_is_not_kept_in_the_history():
    c = client("responses", stateful=False)
    c.next_request()
    assert not c.read_answer(b"event: response.created\ndata: {}\n\n", stream=True)
    assert not c.read_answer(b"not json", stream=False) and c.history == []


def test_every_tenant_user_door_and_kind_is_one_client():
    population = clients({"a": "ka", "b": "kb"}, users_per_tenant=2, turns=5, stream_every=4)
    assert len(population) == 2 * 2 * 3 * 2
    assert len({(c.tenant, c.user, c.door, c.stateful) for c in population}) == len(population)


def test_the_report_gives_growth_from_the_end_of_the_warm_up():
    tally = Tally()
    tally.rss = [{"t": -60.0, "gateway": 100.0}, {"t": 0.0, "gateway": 200.0},
                 {"t": 60.0, "gateway": 210.0}]
    tally.latencies_ms = {"chat": [10.0, 20.0, 30.0]}
    tally.outcomes.update({"chat": 3})
    result = summarise(tally)
    assert result["memory"]["gateway"] == {"start_mb": 200.0, "end_mb": 210.0,
                                           "max_mb": 210.0, "growth_pct": 5.0}
    meta = {"minutes": 1, "warmup_minutes": 1, "date": "d", "rate": 8, "users": 1,
            "clients": 18, "turns": 4, "stream_every": 4, "worker_restarts": 0, "command": "c",
            "machine": {"cores": 2, "cpu_model": "x", "python": "3.11"},
            "source": {"commit": "abc", "uncommitted_changes": False}}
    assert "| gateway | 200.0 | 210.0 | 210.0 | +5.0 % |" in markdown(meta, result)


def test_the_gateway_config_is_valid_and_sets_the_index_budget_only_when_given(monkeypatch):
    monkeypatch.setenv(UPSTREAM_KEY_ENV, "unused")
    default = parse_config(gateway_config(Path("/tmp/d"), "http://127.0.0.1:1"))
    bounded = parse_config(gateway_config(Path("/tmp/d"), "http://127.0.0.1:1",
                                          index_cache_mb=24))
    assert default.memory.index.cache_mb == 512
    assert bounded.memory.index.cache_mb == 24
    assert set(bounded.tenants) == {"acme", "globex", "initech"}


def test_the_report_says_when_idle_conversations_were_deleted():
    tally = Tally()
    tally.rss = [{"t": 0.0, "gateway": 200.0}]
    tally.outcomes.update({"chat": 3, "retired": 7})
    meta = {"minutes": 1, "warmup_minutes": 1, "date": "d", "rate": 8, "users": 1,
            "clients": 18, "turns": 4, "stream_every": 4, "worker_restarts": 0, "command": "c",
            "machine": {"cores": 2, "cpu_model": "x", "python": "3.11"},
            "source": {"commit": "abc", "uncommitted_changes": False}}
    kept = markdown(meta, summarise(tally))
    retired = markdown({**meta, "retire_minutes": 2}, summarise(tally))
    assert "Requests answered: 3 " in kept and "deleted" not in kept
    assert "conversations idle 2 minutes deleted" in retired
    assert "Requests answered: 3 " in retired and "conversations deleted: 7." in retired
