"""The worker: applies recorded turns and derives memory, off the serving event loop.

Recording a turn on the request path is one atomic enqueue (RedisStore.record); applying it
to the transcript, compacting, extracting facts, embedding and indexing is CPU work that would
stall the event loop that serves requests. With `recorder.mode: process` (the default) that
work runs here, in a process of its own:

- `gateway serve` starts one worker as a child process (`WorkerProcess`), shared by all its
  serving processes, restarts it if it dies, and stops it after the server has stopped (so
  the turns of the last requests are applied before the store goes away);
- `gateway worker` runs one alone (`recorder.mode: external` on the serving side), for scale-out:
  any number of workers on any machine that reaches the store; the record stream's consumer
  group shares the turns among them and a crashed worker's turns are reclaimed.

`recorder.mode: background` keeps the old arrangement (the same work as tasks on each serving
process's loop) and `inline` applies each turn before the response (tests).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.config import Config
from gateway.ports import Upstream
from gateway.store.embedded import die_with_parent
from gateway.wiring import PARENT_ENV, open_services, step

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

logger = logging.getLogger("gateway.worker")


async def run_worker(config: Config, url: str, upstream: Upstream,
                     stop: asyncio.Event, *, span_exporter: SpanExporter | None = None) -> None:
    """Apply turns and derive memory until `stop` is set, then drain. This process sets up
    its own tracing (`span_exporter` replaces OTLP: tests)."""
    async with open_services(config, url, upstream, applies_turns=True,
                             span_exporter=span_exporter) as services:
        await services.start_background()
        logger.info(json.dumps({"event": "worker_started", "pid": os.getpid(),
                                "memory": services.memory is not None}))
        await stop.wait()
    recorder = services.recorder
    logger.info(json.dumps({"event": "worker_stopped",
                            "recorder_applied": recorder.applied if recorder else None}))


def serve_worker(config: Config, url: str, upstream: Upstream) -> None:
    """`gateway worker`: run until SIGTERM or SIGINT, then drain and return."""

    if config.recorder.process_nice:
        # Background work: on a core shared with the server, requests come first.
        lower_priority(config.recorder.process_nice)
    parent = os.environ.get(PARENT_ENV)
    if parent is not None:
        # A child of `gateway serve`: end with it, also if it is killed outright (Linux).
        die_with_parent()
        if os.getppid() != int(parent):
            logger.warning(json.dumps({"event": "worker_orphaned", "parent": parent}))
            return

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        try:
            await run_worker(config, url, upstream, stop)
        finally:
            # The direct path's pooled client (an unclosed aiohttp session is logged at exit).
            close = getattr(upstream, "aclose", None)
            if close is not None:
                await step("upstream connections", close())

    asyncio.run(main())


def lower_priority(increment: int) -> None:
    """Nice every thread of this process by `increment` (Linux sets niceness per thread, and
    libraries start threads at import — a BLAS pool among them); threads started later inherit
    it. Elsewhere, the process's niceness.

    On Linux with autogroups (`kernel.sched_autogroup_enabled`, on in most distributions'
    kernels), a process that leads its own session — `gateway serve` starts its worker so — is
    scheduled as its own group, with the same share of a contended core as the server's group
    whatever its threads' nice values: those weigh only inside the group. So such a process
    also nices its autogroup (which then holds only itself and its children); one started from
    a shell does not, since its group is the shell's session.
    (why: docs/decisions.md#lower_priority-nices-the-autogroup-gatewayworkerpy)"""
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        os.nice(increment)
        return
    for tid in os.listdir(tasks):
        try:
            current = os.getpriority(os.PRIO_PROCESS, int(tid))
            os.setpriority(os.PRIO_PROCESS, int(tid), min(19, current + increment))
        except (ProcessLookupError, PermissionError):
            continue  # the thread ended meanwhile
    if os.getsid(0) == os.getpid():
        nice_autogroup(increment)


def nice_autogroup(increment: int, path: Path = Path("/proc/self/autogroup")) -> int | None:
    """Raise the nice value of this process's autogroup by `increment` (at most 19); the
    value set, or None where there is no autogroup to nice (not Linux, autogroups off, or the
    kernel refuses: the threads' nice values then stand alone)."""
    try:
        # "/autogroup-<id> nice <n>"
        current = int(path.read_text().split()[-1])
        target = min(19, current + increment)
        path.write_text(str(target))
    except (OSError, ValueError, IndexError):
        return None
    return target


class WorkerProcess:
    """A `gateway worker` child of `gateway serve`, kept running until `stop()`.

    The child inherits the parent's environment (which names the store the parent started)
    and gets the config path, and SIGTERM from Linux if the
    parent dies without stopping it. If it exits on its own (a crash) it is started again
    after a pause; turns wait in the record stream meanwhile (and are reclaimed from the dead
    consumer), so a crash delays memory, never loses a turn.
    """

    RESTART_PAUSE_SECONDS = 1.0

    def __init__(self, config_path: Path, log_level: str):
        self._args = [sys.executable, "-m", "gateway", "worker", "--config", str(config_path),
                      "--log-level", log_level]
        self._proc: subprocess.Popen[bytes] | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        self._spawn()
        self._watcher = threading.Thread(target=self._watch, name="worker-watch", daemon=True)
        self._watcher.start()

    def _spawn(self) -> None:
        with self._lock:
            if self._stopping.is_set():
                return
            # Its own session: a Ctrl-C on the terminal reaches the server, which stops the
            # worker itself once the last requests' turns are enqueued.
            self._proc = subprocess.Popen(self._args, stdin=subprocess.DEVNULL,
                                          env={**os.environ, PARENT_ENV: str(os.getpid())},
                                          start_new_session=True)

    def _watch(self) -> None:
        while not self._stopping.is_set():
            proc = self._proc
            if proc is None:
                return
            code = proc.wait()
            if self._stopping.is_set():
                return
            self.restarts += 1
            logger.error(json.dumps({"event": "worker_exited", "pid": proc.pid, "code": code,
                                     "restart_in_s": self.RESTART_PAUSE_SECONDS}))
            if self._stopping.wait(self.RESTART_PAUSE_SECONDS):
                return
            self._spawn()

    def stop(self, timeout: float) -> int | None:
        """SIGTERM, then wait up to `timeout` seconds for the drain, then SIGKILL. Returns the
        child's exit code (None if there was none)."""
        self._stopping.set()
        with self._lock:
            proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if proc.poll() is None:
                logger.warning(json.dumps({"event": "worker_killed", "pid": proc.pid,
                                           "after_s": timeout}))
                proc.kill()
        code = proc.wait()
        if self._watcher is not None:
            self._watcher.join(timeout=1)
        return code
