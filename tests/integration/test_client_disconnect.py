"""A client that closes its connection while sending its body is a normal event: one plain
`client_disconnected` log line (method, path, tenant when known), no traceback, at every
route that reads a body — the three doors, count_tokens, the memory settings, the console.

The real app over HTTP (uvicorn on loopback), a real store; the client is a raw socket that
sends its headers and part of the body it announced, then closes.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from urllib.parse import urlsplit

import pytest

from gateway.config import hash_key
from gateway.ops.logs import JsonFormatter
from tests.support.gateway import KEYS, gateway_config, running_gateway

BODY_ROUTES = [
    ("POST", "/v1/chat/completions", "acme"),
    ("POST", "/chat/completions", "acme"),
    ("POST", "/v1/messages", "acme"),
    ("POST", "/v1/messages/count_tokens", "acme"),
    ("POST", "/v1/responses", "acme"),
    ("PATCH", "/v1/memory/settings", "acme"),
    ("POST", "/console/login", None),  # no door: the app's handler, no tenant
]


@pytest.fixture(scope="module")
def gateway_url(valkey_server_url):
    config = gateway_config(valkey_server_url, console={"enabled": True},
                            admin={"keys": [{"sha256": hash_key("admin-key")}]})
    with running_gateway(config) as url:
        yield url


def _send_part_and_close(url: str, method: str, path: str) -> None:
    """Headers announcing 1,000 bytes of body (under every route's limit), 20 of them, then
    the socket closed."""
    address = urlsplit(url)
    head = (f"{method} {path} HTTP/1.1\r\nHost: {address.netloc}\r\n"
            f"Authorization: Bearer {KEYS['acme']}\r\nX-User-Id: u1\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
    with socket.create_connection((address.hostname, address.port), timeout=10) as sock:
        sock.sendall(head.encode() + b'{"model": "echo", "m')


def _logged_lines(caplog: pytest.LogCaptureFixture) -> list[dict]:
    formatter = JsonFormatter()
    return [json.loads(formatter.format(r)) for r in caplog.records]


@pytest.mark.parametrize("method, path, tenant", BODY_ROUTES)
def test_a_client_gone_mid_body_is_one_plain_log_line_without_a_traceback(
        gateway_url, caplog, method, path, tenant):
    with caplog.at_level(logging.INFO):
        _send_part_and_close(gateway_url, method, path)
        deadline = time.monotonic() + 30  # a bound, not a timing assert
        while not any(r.get("event") == "client_disconnected" for r in _logged_lines(caplog)):
            assert time.monotonic() < deadline, _logged_lines(caplog)
            time.sleep(0.05)
        lines = _logged_lines(caplog)
    disconnects = [r for r in lines if r.get("event") == "client_disconnected"]
    assert len(disconnects) == 1
    line = disconnects[0]
    assert (line["method"], line["path"], line["level"]) == (method, path, "info")
    assert line.get("tenant") == tenant
    assert "request_id" in line
    assert not [r for r in lines if "exc_info" in r or "Traceback" in r.get("message", "")]
    assert not [r for r in lines if "unhandled error" in r.get("message", "")]
