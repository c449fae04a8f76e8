"""The benchmark's import build (`python -m bench locomo --build import`) makes the records the
replay makes: one per replayed request, holding what that request records (the new messages
and the reply), so the gateway stores and derives the same from either."""

from __future__ import annotations

from pathlib import Path

from bench.locomo.data import load
from bench.locomo.replay import import_messages
from bench.locomo.script import build_script, session_scripts
from gateway.core.history_import import parse_messages, plan_import

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "conversations_tiny_en.json"


def replayed_records(script) -> list[list[dict]]:
    """What each replayed request records: the messages the stateless client sends that the
    gateway has not seen, then the scripted reply."""
    records, sent = [], 0
    for i in script.requests:
        records.append(list(script.messages[sent:i + 1])
                       + [{"role": "assistant", "content": script.reply(i)}])
        sent = i + 2
    return records


def test_the_import_build_makes_one_record_per_replayed_request_with_its_messages():
    conversation = load(FIXTURE)[0]
    scripts = [build_script(conversation), *session_scripts(conversation)]
    assert any(s.messages[0]["role"] == "assistant" for s in scripts)  # a leading reply too
    for script in scripts:
        body = import_messages(script, 1_800_000_000.0)
        plan = plan_import(parse_messages(body, limit=len(body)), [], batch=64)
        assert [[m.to_openai() for m in r.messages] for r in plan.records] == \
            replayed_records(script)
        times = [r.created_at for r in plan.records]
        assert times == sorted(times) and len(set(times)) == len(times)
