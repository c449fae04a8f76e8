"""Serving an ASGI app (the gateway, the fake upstream) on a real loopback port, in a
background thread with its own event loop — for tests, benchmarks, and embedding the gateway
in another Python program:

    with serve(create_app(config)) as base_url:   # "http://127.0.0.1:<port>"
        ...

The app's lifespan runs (start-up before the URL is yielded, shutdown on exit).
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
