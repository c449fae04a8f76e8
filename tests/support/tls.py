"""One default TLS context per process for the HTTP clients the tests make.

Every `httpx.Client` / `AsyncClient` — each module-level `httpx.post(...)`, each `openai.OpenAI`
or `anthropic.Anthropic` SDK client — builds its TLS context when it is made, loading a CA
bundle (`load_verify_locations`: 30-110 ms on a 2-core machine), for clients that only ever
speak plain HTTP to loopback (nothing in the suite reaches the network). The suite makes
thousands of them: the console and memory API tests alone made 460, 44 s of their 122 s.

`share_default_ssl_context()` makes httpx build the context of the default settings
(`verify=True`, no client certificate) once per process for each value of SSL_CERT_FILE /
SSL_CERT_DIR it reads, and hand that same context to every client: the same settings, the
bundle loaded once. Any other `verify` or `cert` still gets a context of its own, built by httpx.
"""

from __future__ import annotations

import os
import ssl
import threading
from typing import Any

import httpx._transports.default as transports

_lock = threading.Lock()
_shared: dict[tuple[str | None, str | None], ssl.SSLContext] = {}


def share_default_ssl_context() -> None:
    build = transports.create_ssl_context
    if getattr(build, "shares_default", False):
        return

    def create_ssl_context(verify: Any = True, cert: Any = None,
                           trust_env: bool = True) -> ssl.SSLContext:
        if verify is not True or cert:
            return build(verify=verify, cert=cert, trust_env=trust_env)
        key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")) if trust_env \
            else (None, None)
        with _lock:
            if key not in _shared:
                _shared[key] = build(verify=verify, cert=cert, trust_env=trust_env)
            return _shared[key]

    create_ssl_context.shares_default = True  # type: ignore[attr-defined]
    transports.create_ssl_context = create_ssl_context
