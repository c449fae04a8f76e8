"""Running the gateway under test in child processes, so the harness's own work (HTTP client,
scoring, baselines, embeddings) does not share the gateway's GIL.

    with gateway_processes(config_data, 2) as base_urls:
        ...

Several children are replicas over the same store (each with its own recorder and memory
worker consuming the shared record stream), as the gateway runs scaled out.

The child (multiprocessing, spawn) parses the config, builds the app with the stateless
EchoUpstream and serves it on a loopback port (gateway.inprocess.serve: the lifespan runs, so
the recorder and memory worker start and are drained at the end); it sends its URL back and
serves until the parent says stop (or goes away).
"""

from __future__ import annotations

import multiprocessing
from contextlib import ExitStack, contextmanager
from multiprocessing.connection import Connection
from typing import Any, Iterator

STARTUP_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0


def _child(config_data: dict[str, Any], conn: Connection) -> None:
    from bench.locomo.upstream import EchoUpstream
    from gateway.app import create_app
    from gateway.config import parse_config
    from gateway.inprocess import serve

    try:
        app = create_app(parse_config(config_data), upstream=EchoUpstream())
        with serve(app, startup_timeout=STARTUP_TIMEOUT, timeout_graceful_shutdown=5) as url:
            conn.send(("ready", url))
            try:
                conn.recv()  # "stop", or EOFError when the parent is gone
            except EOFError:
                pass
    except BaseException as exc:  # noqa: BLE001 — reported to the parent, then re-raised
        try:
            conn.send(("failed", repr(exc)))
        except OSError:
            pass
        raise


@contextmanager
def gateway_process(config_data: dict[str, Any]) -> Iterator[str]:
    """Serve the gateway configured by `config_data` (the YAML's dict form) in a child
    process; yields its base URL, stops the child on exit."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=_child, args=(config_data, child), name="bench-gateway",
                              daemon=True)
    process.start()
    child.close()
    try:
        if not parent.poll(STARTUP_TIMEOUT):
            raise RuntimeError(f"the gateway did not start within {STARTUP_TIMEOUT} s")
        status, detail = parent.recv()
        if status != "ready":
            raise RuntimeError(f"the gateway failed to start: {detail}")
        yield detail
    finally:
        try:
            parent.send("stop")
        except OSError:
            pass
        process.join(STOP_TIMEOUT)
        if process.is_alive():
            process.terminate()
            process.join(5)
        parent.close()


@contextmanager
def gateway_processes(config_data: dict[str, Any], count: int) -> Iterator[list[str]]:
    """`count` gateway replicas (see gateway_process); yields their base URLs."""
    with ExitStack() as stack:
        yield [stack.enter_context(gateway_process(config_data)) for _ in range(count)]
