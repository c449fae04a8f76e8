"""The gateway's OpenAPI description, fuzzed by schemathesis against the real gateway.

Every operation of `/openapi.json` gets generated requests — valid ones and ones that break
the schema — with a tenant key and without; no answer may be a 5xx, every 4xx is OpenAI's
error shape, and every status is one the description documents.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import status_code_conformance

from gateway.http.openapi import openapi
from tests.support.gateway import KEYS, gateway_config, running_gateway
from tests.support.processes import report

EXAMPLES = 30
"""Generated requests per operation and generation mode (28 operations, 2 modes)."""


@pytest.fixture(scope="module")
def gateway_url(valkey_server_url) -> Iterator[str]:
    with running_gateway(gateway_config(valkey_server_url)) as url:
        yield url


def test_no_operation_answers_a_5xx_and_every_error_is_openai_shaped(gateway_url, capsys):
    spec = httpx.get(gateway_url + "/openapi.json", timeout=10).json()
    assert spec == openapi()  # served as built
    schema = schemathesis.openapi.from_dict(spec)
    headers = {"Authorization": f"Bearer {KEYS['acme']}"}
    statuses: Counter[int] = Counter()
    operations = [result.ok() for result in schema.get_all_operations()]
    for operation, mode in itertools.product(operations, GenerationMode):
        # Valid requests, and requests breaking the schema (negative generation).
        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def call(case: schemathesis.Case) -> None:
            response = case.call(base_url=gateway_url, headers=headers, timeout=30)
            statuses[response.status_code] += 1
            case.validate_response(response, checks=[not_a_server_error,
                                                     status_code_conformance])
            if response.status_code == 405:
                assert response.headers.get("allow"), case.path
            if 400 <= response.status_code < 500:
                if case.path.startswith("/v1/messages"):  # Anthropic's shape at its door
                    body = response.json()
                    assert body["type"] == "error" and set(body["error"]) == {"type",
                                                                                "message"}
                else:
                    assert set(response.json()["error"]) == {"message", "type", "param",
                                                             "code"}
        try:
            call()
        except Unsatisfiable:
            # Nothing to break: an operation without parameters or body (/healthz).
            assert mode is GenerationMode.NEGATIVE, operation.label
    with capsys.disabled():
        report("schemathesis over /openapi.json", operations=len(operations),
               modes="+".join(m.value for m in GenerationMode),
               requests=sum(statuses.values()), by_status=dict(sorted(statuses.items())))
    assert statuses and not any(s >= 500 for s in statuses)


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
