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

The gateway fails open: a request whose memory recall fails, or whose conversation cannot be
read (e.g. a store call slower than the store timeout on a saturated machine), is forwarded
without memory, and nothing in the response says so. The child therefore appends the request
id of every request whose log line carries a `memory_error` or `passthrough:
store_unavailable` to `fail_open_log`, so the harness can tell those apart and ask again.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import sys
from contextlib import ExitStack, contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Iterator

STARTUP_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0


class _FailOpenLog(logging.Handler):
    """Appends the request id of each request log line with a `memory_error`, or forwarded
    unchanged because the store could not be read, to a file."""

    def __init__(self, path: str) -> None:
        super().__init__(logging.INFO)
        self.path = path

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = json.loads(record.getMessage())
        except ValueError:
            return
        if isinstance(line, dict) and (line.get("memory_error")
                                       or line.get("passthrough") == "store_unavailable"):
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(f"{line.get('request_id')}\n")


def read_fail_open(path: str) -> set[str]:
    """The request ids the children logged as answered without memory."""
    try:
        with open(path, encoding="utf-8") as f:
            return {line.strip() for line in f if line.strip()}
    except FileNotFoundError:
        return set()


def _child(config_data: dict[str, Any], fail_open_log: str, conn: Connection,
           vector_cache: str | None = None) -> None:
    from bench.locomo.upstream import EchoUpstream
    from bench.locomo.vector_cache import CachedEmbedder
    from gateway.http.app import create_app
    from gateway.config import parse_config
    from gateway.inprocess import serve

    request_log = logging.getLogger("gateway.request")
    request_log.setLevel(logging.INFO)
    request_log.addHandler(_FailOpenLog(fail_open_log))
    try:
        config = parse_config(config_data)
        embedder = None
        if vector_cache is not None and config.memory.embedder.backend == "use":
            embedder = CachedEmbedder(Path(vector_cache))
        app = create_app(config, upstream=EchoUpstream(), embedder=embedder)
        with serve(app, startup_timeout=STARTUP_TIMEOUT, timeout_graceful_shutdown=5) as url:
            conn.send(("ready", url))
            try:
                conn.recv()  # "stop", or EOFError when the parent is gone
            except EOFError:
                pass
        if embedder is not None:
            embedder.save()
            print(f"[locomo] gateway child: vector cache {embedder.hits} hits, "
                  f"{embedder.misses} embedded", file=sys.stderr, flush=True)
    except BaseException as exc:  # noqa: BLE001 — reported to the parent, then re-raised
        try:
            conn.send(("failed", repr(exc)))
        except OSError:
            pass
        raise


@contextmanager
def gateway_process(config_data: dict[str, Any], fail_open_log: str,
                    vector_cache: Path | None = None) -> Iterator[str]:
    """Serve the gateway configured by `config_data` (the YAML's dict form) in a child
    process; yields its base URL, stops the child on exit. `vector_cache`: its embedder reads
    vectors from this cache (bench/locomo/vector_cache.py), when it is the default one."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    cache = None if vector_cache is None else str(vector_cache)
    process = context.Process(target=_child, args=(config_data, fail_open_log, child, cache),
                              name="bench-gateway",
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
def gateway_processes(config_data: dict[str, Any], count: int, fail_open_log: str,
                      vector_cache: Path | None = None) -> Iterator[list[str]]:
    """`count` gateway replicas (see gateway_process); yields their base URLs."""
    with ExitStack() as stack:
        yield [stack.enter_context(gateway_process(config_data, fail_open_log, vector_cache))
               for _ in range(count)]
