"""`gateway import FILE`: a ChatGPT export (its active branch only) and a LoCoMo-schema file
imported into a real store, then read back through the gateway over HTTP."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gateway.cli import main
from gateway.config import hash_key, load_config
from tests.support.gateway import KEYS, data_dir, running_gateway

ERIN = "erin-7Q"


def node(id: str, parent: str | None, children: list[str], role: str | None = None,
         text: str = "", time: float | None = None, **message: Any) -> dict[str, Any]:
    body = None if role is None else {
        "id": id, "author": {"role": role}, "create_time": time,
        "content": {"content_type": message.pop("content_type", "text"), "parts": [text]},
        **message}
    return {"id": id, "parent": parent, "children": children, "message": body}


# A trip chat whose second question was edited (u2 → u2b): the old branch must stay out, and so
# must the system prompt, the browsing tool call and its output.
CHATGPT = [{
    "title": "Lisbon trip", "create_time": 1_700_000_000.0, "conversation_id": "trip-1",
    "current_node": "a2b",
    "mapping": {
        "root": node("root", None, ["sys"]),
        "sys": node("sys", "root", ["u1"], "system", "You are ChatGPT.", None),
        "u1": node("u1", "sys", ["a1"], "user", "Plan three days in Lisbon.", 1_700_000_010.5),
        "a1": node("a1", "u1", ["u2", "u2b"], "assistant", "Day 1: Alfama and the castle.",
                   None),
        "u2": node("u2", "a1", ["a2"], "user", "What about food?", 1_700_000_100.0),
        "a2": node("a2", "u2", [], "assistant", "Try pastéis de nata.", 1_700_000_110.0),
        "u2b": node("u2b", "a1", ["call"], "user", "What about museums?", 1_700_000_200.0),
        "call": node("call", "u2b", ["out"], "assistant", "search('Lisbon museums')",
                     1_700_000_201.0, recipient="browser", content_type="code"),
        "out": node("out", "call", ["a2b"], "tool", "Gulbenkian, MAAT", 1_700_000_202.0),
        "a2b": node("a2b", "out", [], "assistant", "The Gulbenkian and MAAT.",
                    1_700_000_210.0),
    }}]

LOCOMO = [{"sample_id": "beekeeping", "conversation": {
    "speaker_a": "Odalys", "speaker_b": "Brann",
    "session_1_date_time": "1:56 pm on 8 May, 2023",
    "session_1": [{"speaker": "Odalys", "dia_id": "D1:1", "text": "My bees swarmed."},
                  {"speaker": "Brann", "dia_id": "D1:2", "text": "Did you catch them?",
                   "blip_caption": "a swarm on a branch"}],
    "session_2_date_time": "2023/05/20 (Sat) 02:21",
    "session_2": [{"speaker": "Odalys", "dia_id": "D2:1", "text": "Marigold is back."}]},
    "qa": []}]


@pytest.fixture
def config_file(tmp_path, redis_url) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({
        "store": redis_url, "recorder": {"mode": "background"},
        "memory": {"embedder": {"kind": "hash"}}, "server": {"data_dir": data_dir()},
        "tenants": {"acme": {"api_keys": [{"sha256": hash_key(KEYS["acme"])}],
                             "models": {"echo": {"model": "fake/echo"}}}}}))
    return path


def run_import(capsys, config: Path, file: Path, *args: str) -> tuple[int, list[dict]]:
    with pytest.raises(SystemExit) as exit:
        main(["import", str(file), "--config", str(config), "--tenant", "acme",
              "--user", ERIN, *args])
    out = capsys.readouterr().out
    return exit.value.code, [json.loads(line) for line in out.splitlines()]


def transcript(url: str, conversation: str) -> list[dict[str, Any]]:
    """The conversation's messages once the gateway's recorder has applied every imported
    turn (the CLI only enqueues them)."""
    deadline = time.monotonic() + 60
    while True:
        response = httpx.get(f"{url}/v1/memory/conversations/{conversation}", timeout=30,
                             headers={"Authorization": f"Bearer {KEYS['acme']}",
                                      "X-User-Id": ERIN})
        assert response.status_code == 200, response.text
        document = response.json()
        if not document["pending"]:
            break
        assert time.monotonic() < deadline, document["pending"]
        time.sleep(0.05)
    return [{"role": m["message"]["role"], "content": m["message"]["content"],
             "created_at": m["created_at"]} for m in document["messages"]]


def test_a_chatgpt_export_imports_its_active_branch_only(tmp_path, capsys, config_file):
    file = tmp_path / "conversations.json"
    file.write_text(json.dumps(CHATGPT))

    code, lines = run_import(capsys, config_file, file)
    assert code == 0
    assert [(l["conversation"], l["added"], l["applied"]) for l in lines] == [
        ("trip-1", 4, False)]
    with running_gateway(load_config(str(config_file))) as url:
        assert transcript(url, "trip-1") == [
            {"role": "user", "content": "Plan three days in Lisbon.", "created_at": 1_700_000_010.5},
            # no time of its own: the one before it
            {"role": "assistant", "content": "Day 1: Alfama and the castle.",
             "created_at": 1_700_000_010.5},
            {"role": "user", "content": "What about museums?", "created_at": 1_700_000_200.0},
            {"role": "assistant", "content": "The Gulbenkian and MAAT.",
             "created_at": 1_700_000_210.0}]

    # Again: nothing added; into a conversation id of one's choosing.
    assert run_import(capsys, config_file, file)[1][0]["added"] == 0
    code, lines = run_import(capsys, config_file, file, "--conversation", "lisbon")
    assert (code, lines[0]["conversation"], lines[0]["added"]) == (0, "lisbon", 4)


def test_a_locomo_file_imports_each_turn_at_its_session_date(tmp_path, capsys, config_file):
    file = tmp_path / "locomo.json"
    file.write_text(json.dumps(LOCOMO))
    code, lines = run_import(capsys, config_file, file, "--format", "locomo")
    assert (code, lines[0]["conversation"], lines[0]["added"]) == (0, "beekeeping", 3)
    with running_gateway(load_config(str(config_file))) as url:
        assert transcript(url, "beekeeping") == [
            {"role": "user", "content": "Odalys: My bees swarmed.", "created_at": 1683554160.0},
            {"role": "assistant", "content": "Brann: Did you catch them? [shares a photo: a "
                                             "swarm on a branch]", "created_at": 1683554161.0},
            {"role": "user", "content": "Odalys: Marigold is back.",
             "created_at": 1684549260.0}]


def test_a_bad_file_or_tenant_exits_2_and_imports_nothing(tmp_path, capsys, config_file):
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps([{"mapping": {"a": node("a", "gone", [], "user", "hi", 1.0)},
                                   "current_node": "a"}]))
    with pytest.raises(SystemExit) as exit:
        main(["import", str(broken), "--config", str(config_file), "--tenant", "acme",
              "--user", ERIN])
    assert exit.value.code == 2
    assert "missing or part of a cycle" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit:
        main(["import", str(broken), "--config", str(config_file), "--tenant", "nobody",
              "--user", ERIN])
    assert exit.value.code == 2
    assert "no tenant 'nobody'" in capsys.readouterr().err
