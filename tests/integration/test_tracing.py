"""OpenTelemetry tracing (gateway/ops/tracing.py): spans through the real gateway over HTTP, the
real openai SDK as client and a real store, collected by the SDK's in-memory exporter; the
worker process's memory jobs; nothing of OpenTelemetry imported when tracing is off."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.config import ConfigError, parse_config
from gateway.http.app import create_app
from gateway.wiring import routing_upstream
from gateway.worker import run_worker
from tests.support.gateway import KEYS, gateway_config
from tests.support.servers import serve

ROOT = Path(__file__).resolve().parents[2]
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"
STEPS = {"gateway.load", "gateway.recall", "gateway.rewrite", "gateway.upstream",
         "gateway.record"}


def traced(store: str, **top):
    return gateway_config(store, tracing={"enabled": True}, **top)


@pytest.fixture
def exporter():
    return InMemorySpanExporter()


@pytest.fixture
def gateway_url(redis_url, exporter):
    with serve(create_app(traced(redis_url), span_exporter=exporter)) as url:
        yield url


def sdk(url: str, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=KEYS["acme"], max_retries=0,
                         default_headers={"X-Conversation-Id": "conv-7", "X-User-Id": "uma",
                                          **headers})


def wait_for_spans(exporter, condition, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while not condition(spans := exporter.get_finished_spans()):
        assert time.monotonic() < deadline, [s.name for s in spans]
        time.sleep(0.05)
    return spans


def request_span(spans):
    return next(s for s in spans if s.name == "gateway.chat_completion")


def test_a_request_makes_a_span_with_its_steps_as_children(gateway_url, exporter):
    reply = sdk(gateway_url).chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "trace me"}])
    assert reply.choices[0].message.content == "trace me"
    spans = wait_for_spans(exporter, lambda s: any(x.name == "gateway.chat_completion"
                                                   for x in s))
    root = request_span(spans)
    attributes = dict(root.attributes)
    assert attributes["session.id"] == "conv-7" and attributes["user.id"] == "uma"
    assert attributes["gateway.tenant"] == "acme"
    assert attributes["gen_ai.request.model"] == "echo"
    assert attributes["gateway.tokens.original"] > 0
    assert attributes["gateway.tokens.forwarded"] == attributes["gateway.tokens.original"]
    assert attributes["http.response.status_code"] == 200
    assert root.parent is None

    children = [s for s in spans if s.parent is not None
                and s.parent.span_id == root.context.span_id]
    assert {s.name for s in children} == STEPS
    for child in children:
        assert child.context.trace_id == root.context.trace_id
        assert root.start_time <= child.start_time <= child.end_time <= root.end_time
    upstream = next(s for s in children if s.name == "gateway.upstream")
    assert upstream.attributes["gen_ai.usage.input_tokens"] > 0  # the fake reports usage
    assert upstream.attributes["gen_ai.usage.output_tokens"] > 0

    # Inline recording ran the memory worker: its jobs, each a child of the conversation's.
    memory = wait_for_spans(exporter, lambda s: any(x.name == "gateway.memory" for x in s))
    job = next(s for s in memory if s.name == "gateway.memory")
    assert job.attributes["session.id"] == "conv-7" and job.attributes["user.id"] == "uma"
    names = {s.name for s in memory if s.parent is not None
             and s.parent.span_id == job.context.span_id}
    assert {"memory.embed", "memory.summarise", "memory.extract"} <= names


def test_a_clients_traceparent_becomes_the_parent(gateway_url, exporter):
    client = sdk(gateway_url, traceparent=f"00-{TRACE_ID}-{PARENT_SPAN}-01")
    stream = client.chat.completions.create(
        model="echo", stream=True, messages=[{"role": "user", "content": "streamed"}])
    assert "".join(c.choices[0].delta.content or "" for c in stream) == "streamed"
    spans = wait_for_spans(exporter, lambda s: any(x.name == "gateway.chat_completion"
                                                   for x in s))
    root = request_span(spans)
    assert format(root.context.trace_id, "032x") == TRACE_ID
    assert format(root.parent.span_id, "016x") == PARENT_SPAN and root.parent.is_remote
    assert root.attributes["gateway.stream"] is True
    assert {s.name for s in spans if s.parent and s.parent.span_id == root.context.span_id} \
        == STEPS


@pytest.mark.parametrize("path, body", [
    ("/v1/messages", {"model": "echo", "max_tokens": 16,
                      "messages": [{"role": "user", "content": "over Messages"}]}),
    ("/v1/responses", {"model": "echo", "input": "over Responses"}),
])
def test_a_clients_traceparent_becomes_the_parent_at_every_door(gateway_url, exporter, path,
                                                                body):
    response = httpx.post(gateway_url + path, timeout=30, json=body, headers={
        "Authorization": f"Bearer {KEYS['acme']}",
        "traceparent": f"00-{TRACE_ID}-{PARENT_SPAN}-01"})
    assert response.status_code == 200, response.text
    root = request_span(wait_for_spans(
        exporter, lambda s: any(x.name == "gateway.chat_completion" for x in s)))
    assert format(root.context.trace_id, "032x") == TRACE_ID
    assert format(root.parent.span_id, "016x") == PARENT_SPAN and root.parent.is_remote


def test_an_upstream_error_marks_the_request_span_failed(gateway_url, exporter):
    response = httpx.post(gateway_url + "/v1/chat/completions", timeout=30, json={
        "model": "broken", "messages": [{"role": "user", "content": "x"}]},
        headers={"Authorization": f"Bearer {KEYS['acme']}"})
    assert response.status_code == 500
    root = request_span(wait_for_spans(
        exporter, lambda s: any(x.name == "gateway.chat_completion" for x in s)))
    assert root.status.status_code.name == "ERROR"
    assert root.attributes["gateway.passthrough"] == "no_conversation_id"
    assert "session.id" not in root.attributes


async def test_the_worker_process_traces_its_memory_jobs(redis_url, exporter):
    """`gateway worker` (here run_worker in process) sets up tracing of its own."""
    config = traced(redis_url, recorder={"mode": "external"})
    stop, serving = asyncio.Event(), InMemorySpanExporter()
    worker = asyncio.create_task(run_worker(config, redis_url, routing_upstream(config), stop,
                                            span_exporter=exporter))
    try:
        with serve(create_app(config, span_exporter=serving)) as url:
            async with httpx.AsyncClient(timeout=30) as client:
                response = await client.post(url + "/v1/chat/completions", json={
                    "model": "echo", "messages": [{"role": "user", "content": "remember"}]},
                    headers={"Authorization": f"Bearer {KEYS['acme']}",
                             "X-Conversation-Id": "worked", "X-User-Id": "uma"})
            assert response.status_code == 200
            deadline = time.monotonic() + 20
            while not [s for s in exporter.get_finished_spans() if s.name == "gateway.memory"]:
                assert time.monotonic() < deadline, "no memory span from the worker"
                await asyncio.sleep(0.05)
    finally:
        stop.set()
        await worker
    job = next(s for s in exporter.get_finished_spans() if s.name == "gateway.memory")
    assert job.attributes["session.id"] == "worked" and job.attributes["gateway.tenant"] == "acme"
    # Each process exports its own: requests from the server, memory jobs from the worker.
    assert not [s for s in exporter.get_finished_spans() if s.name.startswith("gateway.chat")]
    assert [s.name for s in serving.get_finished_spans()] and not [
        s for s in serving.get_finished_spans() if s.name.startswith("memory.")]


_OFF = """
import json, sys
import httpx
from tests.support.gateway import KEYS, gateway_config, running_gateway

def loaded():
    return sorted(m for m in sys.modules if m.startswith("opentelemetry"))

# redis-py itself imports OpenTelemetry's metrics SDK when it is installed (its own optional
# instrumentation, off unless a program turns it on): that much is there before any request.
before = loaded()
with running_gateway(gateway_config(sys.argv[1])) as url:
    for stream in (False, True):
        response = httpx.post(url + "/v1/chat/completions", timeout=30,
                              headers={"Authorization": "Bearer " + KEYS["acme"],
                                       "X-Conversation-Id": "off",
                                       "traceparent": "00-%s-%s-01"},
                              json={"model": "echo", "stream": stream,
                                    "messages": [{"role": "user", "content": "hi"}]})
        assert response.status_code == 200, response.text
print(json.dumps({"before": before, "after": loaded()}))
""" % (TRACE_ID, PARENT_SPAN)


def test_tracing_off_imports_no_tracing_sdk_and_no_exporter(redis_url):
    done = subprocess.run([sys.executable, "-c", _OFF, redis_url], check=False, cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["after"] == seen["before"]  # serving imported nothing more
    assert not [m for m in seen["after"] if m.startswith(("opentelemetry.sdk.trace",
                                                           "opentelemetry.exporter"))]


_WITHOUT_PACKAGES = """
import sys

class Missing:  # as if the `otel` extra were not installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            raise ModuleNotFoundError(name)

sys.meta_path.insert(0, Missing())
from gateway.config import ConfigError
from tests.support.gateway import gateway_config
try:
    gateway_config("embedded", tracing={"enabled": True})
except ConfigError as exc:
    print(exc)
gateway_config("embedded", tracing={"enabled": False})
print("off: ok")
"""


def test_tracing_on_without_its_packages_fails_at_start_naming_the_key():
    done = subprocess.run([sys.executable, "-c", _WITHOUT_PACKAGES], check=False, cwd=ROOT,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert "tracing.enabled: tracing needs opentelemetry-sdk" in done.stdout
    assert "context-gateway[otel]" in done.stdout and "off: ok" in done.stdout


@pytest.mark.parametrize("tracing, key", [
    ({"enabled": True, "sample_ratio": 1.5}, "tracing.sample_ratio"),
    ({"enabled": True, "endpoint": "localhost:4318"}, "tracing.endpoint"),
    ({"enabled": True, "headers_env": "GATEWAY_TEST_UNSET_HEADERS"}, "tracing.headers_env"),
    ({"enabled": True, "exporter": "jaeger"}, "tracing.exporter"),
])
def test_bad_tracing_config_names_the_key(tracing, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        parse_config({"tracing": tracing, "tenants": {"acme": {
            "api_keys": [{"sha256": "0" * 64}], "models": {"m": {"model": "fake/echo"}}}}})
