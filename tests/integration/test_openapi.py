"""The gateway's OpenAPI description, fuzzed by schemathesis against the real gateway.

The schemathesis CLI (its own engine: coverage, fuzzing and stateful phases, valid requests and
requests that break the schema) runs over every operation of `/openapi.json` with a tenant key,
as a user holding over 100 MB (a 100-message conversation of a million characters each, another
with facts, summary chunks and pins, a stored response); the conversation, message, fact, chunk
and response ids it draws are the user's own half the time (schemathesis dictionaries), so the
memory API really reads, pins and deletes that user's data. No answer may be a 5xx, every status
is one the description documents, every 4xx is its door's error shape, every 405 has `Allow`,
and the run reports no schemathesis warning (missing test data, schema/validation mismatch,
missing auth…): the description and the validation agree.

Two runs: first every operation but the two that delete whole conversations or the user, then
those two — so the fuzzed erase starts from the whole 100 MB user.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from gateway.http.openapi import openapi
from tests.integration.test_memory_big_user import USER, _write_big_user
from tests.integration.test_memory_erase import converse, memory_config
from tests.support.gateway import KEYS, running_gateway
from tests.support.processes import report

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = 65
"""Generated requests per operation and phase (schemathesis's `max-examples`)."""
DELETES = ("DELETE /v1/memory/conversations/{conversation_id}", "DELETE /v1/memory")
"""The operations run last, each on its own, in this order (each deletes what the runs before
it read): the conversations' delete, then the user's erase."""
MODELS = ["echo", "messages"]
"""The tenant's model aliases: `model` in the description the fuzz is given (the served one
says "an alias of the tenant", which for this tenant is one of these)."""
AUTH = {"Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": USER}


@pytest.fixture(scope="module")
def big_user(valkey_server_url) -> Iterator[tuple[str, dict[str, list[str]]]]:
    """The gateway and the ids of its 100 MB user's data, by kind."""
    with redis.Redis.from_url(valkey_server_url) as client:
        client.flushdb()
    _write_big_user(valkey_server_url)
    try:
        with running_gateway(memory_config(valkey_server_url)) as url:
            converse(url, "acme", USER, "chat", [
                "My name is Quentin Blake.", "I live in Lisbon.",
                *(f"Note {i}: the garden needs water on day {i}." for i in range(4))])
            yield url, _ids(url)
    finally:
        with redis.Redis.from_url(valkey_server_url) as client:
            client.flushdb()


def _ids(url: str) -> dict[str, list[str]]:
    def get(path: str) -> dict:
        response = httpx.get(url + path, headers=AUTH, timeout=60)
        assert response.status_code == 200, response.text
        return response.json()

    stored = httpx.post(url + "/v1/responses", headers=AUTH, timeout=30,
                        json={"model": "echo", "input": "Remember the blue door."})
    assert stored.status_code == 200, stored.text
    messages = [m["id"] for m in get("/v1/memory/conversations/chat")["messages"]]
    pinned = httpx.put(url + f"/v1/memory/conversations/chat/pins/{messages[0]}",
                       headers=AUTH, timeout=30)
    assert pinned.status_code == 200, pinned.text
    ids = {"conversations": ["huge", "chat", "small"], "chat": ["chat"], "messages": messages,
           "facts": [f["key"] for f in get("/v1/memory/facts")["data"]],
           "chunks": [c["id"] for c in get("/v1/memory/conversations/chat/chunks")["data"]],
           "responses": [stored.json()["id"]]}
    assert all(ids.values()), ids
    return ids


def _config(ids: dict[str, list[str]]) -> str:
    """schemathesis.toml: the user's headers, and its ids drawn half the time."""
    lines = ["[generation]", f"max-examples = {EXAMPLES}", 'database = "none"', "",
             "[headers]", *(f'"{k}" = "{v}"' for k, v in AUTH.items()), ""]
    for name, values in ids.items():
        lines += [f"[dictionaries.{name}]", f"values = {json.dumps(values)}", ""]
    lines += ["[parameters]"]
    for parameter, name in [("path.conversation_id", "conversations"),
                            ("path.message_id", "messages"), ("path.fact_key", "facts"),
                            ("path.chunk_id", "chunks"), ("path.response_id", "responses")]:
        lines.append(f'"{parameter}" = {{ dictionary = "{name}", probability = 0.5 }}')
    # The doors fuzz as another user: one chat request into the 100 MB conversation (the
    # body's `conversation_id` drawn as "huge", one empty user message) took 74 s with this
    # gateway's memory settings (inline recording, compaction after two rounds) — 0.15 s with
    # memory's defaults: a cost of such a conversation at the door, not this test's subject.
    lines += ["", "[[operations]]",
              'include-path-regex = "^/v1/(chat/completions|messages|responses)"',
              'headers = { "X-User-Id" = "door-user" }']
    # Chunks and pins are those of one conversation: their ids go with its own.
    for path in ("/chunks/", "/pins/"):
        lines += ["", "[[operations]]", f'include-path-regex = "{path}"',
                  'parameters = { "path.conversation_id" = '
                  '{ dictionary = "chat", probability = 0.5 } }']
    return "\n".join(lines) + "\n"


def _tenants_description(spec: dict) -> dict:
    """The description as this tenant's: `model` one of its aliases."""
    model = json.dumps({"type": "string", "minLength": 1,
                        "description": "A model alias of the tenant."})
    text = json.dumps(spec)
    assert model in text
    return json.loads(text.replace(model, json.dumps({"enum": MODELS})))


def _schemathesis(url: str, config: Path, tmp: Path, name: str, *filters: str) -> dict:
    """One schemathesis CLI run over the description (tmp/openapi.json); its JSON report."""
    out = tmp / f"{name}.json"
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.support.schemathesis_hooks",
           "PYTHONPATH": str(ROOT), "GATEWAY_SCHEMATHESIS_STATUSES": str(tmp / "statuses")}
    command = [str(Path(sys.executable).parent / "schemathesis"), "--config-file", str(config),
               "run", str(tmp / "openapi.json"), "--url", url, "--seed", "26",
               "--workers", "1", "--no-color",
               "--checks", "not_a_server_error,status_code_conformance,"
                           "error_in_the_doors_shape,allow_on_405",
               "--request-timeout", "120", "--report", "json", "--report-json-path", str(out),
               *filters]
    run = subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True,
                         timeout=600)
    (tmp / f"{name}.log").write_text(run.stdout + run.stderr)
    assert out.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert run.returncode == 0 and result["exit_code"] == 0, run.stdout[-6000:]
    return result


def test_no_operation_answers_a_5xx_and_schemathesis_warns_of_nothing(big_user, tmp_path,
                                                                       capsys):
    url, ids = big_user
    spec = httpx.get(url + "/openapi.json", timeout=10).json()
    assert spec == openapi()  # served as built
    (tmp_path / "openapi.json").write_text(json.dumps(_tenants_description(spec)))
    config = tmp_path / "schemathesis.toml"
    config.write_text(_config(ids))
    runs = [_schemathesis(url, config, tmp_path, "most",
                          *(f for name in DELETES for f in ("--exclude-name", name))),
            *(_schemathesis(url, config, tmp_path, f"last-{i}", "--include-name", name)
              for i, name in enumerate(DELETES))]
    calls = [line.split(" ", 3) for line in (tmp_path / "statuses").read_text().splitlines()]
    statuses = Counter(int(status) for status, _, _, _ in calls)
    operations = sum(r["operations"]["tested"] for r in runs)
    cases = sum(r["test_cases"]["generated"] for r in runs)
    warnings = {kind: labels for r in runs for kind, labels in r["warnings"].items() if labels}
    with capsys.disabled():
        report("schemathesis over /openapi.json", operations=operations, cases=cases,
               requests=sum(statuses.values()), by_status=dict(sorted(statuses.items())),
               warnings=len(warnings),
               server_seconds=round(sum(float(elapsed) for _, elapsed, _, _ in calls), 1))
    assert operations == sum(len(methods) for methods in spec["paths"].values())
    assert all(r["test_cases"]["with_failures"] == 0 and not r["errors"] for r in runs)
    assert warnings == {}
    assert cases >= 3000
    assert statuses and not any(s >= 500 for s in statuses)
    # The fuzz acted on the 100 MB user: read its big conversation, exported it, erased it.
    answered = {(method, path) for status, _, method, path in calls if status == "200"}
    assert {("GET", "/v1/memory/conversations/huge"), ("GET", "/v1/memory/export"),
            ("DELETE", "/v1/memory")} <= answered


def test_the_description_names_every_route_of_the_app():
    from gateway.http.anthropic import anthropic_routes
    from gateway.http.memory_api import memory_routes
    from gateway.http.responses import responses_routes
    from gateway.http.routes import routes

    documented = {(path, method.upper()) for path, ops in openapi()["paths"].items()
                  for method in ops}
    served = {(r.path, m) for r in [*routes, *memory_routes, *anthropic_routes,
                                    *responses_routes] for m in (r.methods or ())
              if m != "HEAD" and r.path not in ("/chat/completions", "/models", "/metrics",
                                                "/openapi.json")}
    assert served == documented


def test_the_console_pages_are_html_outside_the_api_description():
    """The console (`console.enabled`) serves HTML pages for a browser, not an API: its routes
    are all under /console, and none is in the description."""
    from gateway.http.console import console_routes

    assert all(r.path.startswith("/console") for r in console_routes())
    assert not any(path.startswith("/console") for path in openapi()["paths"])
