"""Run an ASGI app on a real loopback port, in a background thread, for the duration of a test.

    with serve(create_fake_app()) as base_url:   # "http://127.0.0.1:<port>"
        ...

Works from sync and async tests alike: the server has its own thread and event loop.
"""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

import uvicorn


@contextmanager
def serve(app: Any, *, host: str = "127.0.0.1", startup_timeout: float = 10.0,
          **config: Any) -> Iterator[str]:
    """Serve `app` on a free port of `host`; yields its base URL, stops the server on exit.

    Extra keyword arguments go to uvicorn.Config (e.g. lifespan="off").
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    settings = {"log_level": "warning", "access_log": False, "timeout_graceful_shutdown": 2,
                **config}
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, **settings))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]},
                              name=f"serve-{port}", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + startup_timeout
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server on {host}:{port} did not start")
            time.sleep(0.01)
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=startup_timeout)
        sock.close()


def closed_port(host: str = "127.0.0.1") -> int:
    """A loopback port nothing listens on (connection refused), for unreachable-upstream tests."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
