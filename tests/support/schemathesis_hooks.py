"""Schemathesis hooks for tests/integration/test_openapi.py, loaded by the schemathesis CLI
that the test runs (`SCHEMATHESIS_HOOKS=tests.support.schemathesis_hooks`).

Two checks of the gateway's own on every response — every 4xx in its door's error shape, every
405 with `Allow` — and, per response, its status counted in the file named by
`GATEWAY_SCHEMATHESIS_STATUSES` (a line per response: status, seconds, method, path), which the test
sums.
"""

from __future__ import annotations

import os

import schemathesis


@schemathesis.check
def error_in_the_doors_shape(ctx, response, case) -> None:
    """A 4xx is OpenAI's error shape; at the Messages door, Anthropic's."""
    if not 400 <= response.status_code < 500:
        return
    body = response.json()
    if case.path.startswith("/v1/messages"):
        assert body.get("type") == "error" and set(body.get("error", ())) == {
            "type", "message"}, (response.status_code, body)
    else:
        assert set(body.get("error", ())) == {"message", "type", "param", "code"}, (
            response.status_code, body)


@schemathesis.check
def allow_on_405(ctx, response, case) -> None:
    if response.status_code == 405:
        assert response.headers.get("allow"), case.path


@schemathesis.hook
def after_call(context, case, response) -> None:
    path = os.environ.get("GATEWAY_SCHEMATHESIS_STATUSES")
    if path:
        with open(path, "a") as out:
            out.write(f"{response.status_code} {response.elapsed:.3f} {case.method} "
                      f"{case.formatted_path}\n")
