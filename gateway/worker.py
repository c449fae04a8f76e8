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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable

import redis.asyncio as aioredis

from gateway.config import Config
from gateway.ops.job_metrics import JobMetrics
from gateway.memory.runtime import MemoryRuntime, build_memory
from gateway.ports import Upstream
from gateway.store import connect
from gateway.store.cluster import key_space
from gateway.store.crypto import NO_ENCRYPTION, Encryption
from gateway.store.embedded import die_with_parent
from gateway.store.keyring import load_encryption
from gateway.store.recording.recorder import Recorder
from gateway.store.recording.sharded import ShardedRecorder
from gateway.config.tenants import TenantDirectory
from gateway.ops.tracing import start_tracing

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

logger = logging.getLogger("gateway.worker")

WORKER_ENV = "GATEWAY_WORKER"
"""Set by `gateway serve` for its serving processes: a worker process runs beside them."""
PARENT_ENV = "GATEWAY_WORKER_PARENT"
"""Set for a worker child: the pid of the `gateway serve` that started it."""


def build_recorder(config: Config, client: aioredis.Redis,
                   jobs: JobMetrics | None = None, *,
                   encryption: Encryption = NO_ENCRYPTION) -> Recorder | ShardedRecorder:
    """One Redis: a `Recorder` of the one record stream; a cluster: one per shard's stream."""
    r = config.recorder
    options: dict[str, Any] = {
        "workers": r.workers, "max_attempts": r.max_attempts,
        "backoff_seconds": r.backoff_seconds,
        "claim_idle_ms": int(r.claim_idle_seconds * 1000), "jobs": jobs,
        "encryption": encryption}
    keys = key_space(config)
    if keys.cluster:
        return ShardedRecorder(client, keys, **options)
    return Recorder(client, keys, **options)


@dataclass
class Background:
    """The recorder and the memory worker of one process, started and drained together."""

    recorder: Recorder | ShardedRecorder
    memory: MemoryRuntime | None

    async def start(self) -> None:
        await self.recorder.start()
        if self.memory is not None:
            await self.memory.worker.start()

    async def drain(self, timeout: float, claim_idle_seconds: float) -> None:
        """Apply what is queued now (each step bounded by `timeout`), then leave the consumer
        group tidy. Every step tolerates a store that is gone: it logs and the next runs."""
        await step("recorder", self.recorder.drain(timeout), timeout)
        await step("recorder consumers", self.recorder.remove_consumers(
            stale_after_ms=max(60_000, 4 * int(claim_idle_seconds * 1000))), timeout)
        if self.memory is not None:
            await step("memory worker", self.memory.worker.drain(timeout), timeout)


async def step(name: str, work: Awaitable[Any], timeout: float = 10.0) -> None:
    """One shutdown step, bounded by `timeout` (+1 s for a step that bounds itself by it to
    finish): its failure or overrun is logged and the next step runs."""
    try:
        await asyncio.wait_for(work, timeout + 1)  # a hung store too
    except Exception as exc:  # noqa: BLE001 — shutdown must finish; each failure is logged
        logger.warning(json.dumps({"event": "shutdown_step_failed", "step": name,
                                   "error": repr(exc)}))


async def run_worker(config: Config, url: str, upstream: Upstream,
                     stop: asyncio.Event, *, span_exporter: SpanExporter | None = None) -> None:
    """Apply turns and derive memory until `stop` is set, then drain. This process sets up
    its own tracing (`span_exporter` replaces OTLP: tests)."""
    timeout = config.server.store_timeout_seconds
    cluster = config.store_cluster.enabled
    memory_redis = connect(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                           cluster=cluster)
    # The recorder's blocking stream reads outlast any socket timeout: a connection of its own.
    recorder_redis = connect(url, socket_connect_timeout=timeout, cluster=cluster)
    jobs = JobMetrics(memory_redis)  # job latency and retries, for every replica's /metrics
    memory = None
    encryption = await load_encryption(config, memory_redis)
    tracing = start_tracing(config.tracing, span_exporter)
    if any(t.memory.enabled for t in config.tenants.values()):
        memory = build_memory(config, memory_redis, upstream, TenantDirectory(config),
                              tracing=tracing, jobs=jobs, encryption=encryption)
        await memory.embedding.warm_up()
    background = Background(build_recorder(config, recorder_redis, jobs,
                                           encryption=encryption), memory)
    await background.start()
    logger.info(json.dumps({"event": "worker_started", "pid": os.getpid(),
                            "memory": memory is not None}))
    try:
        await stop.wait()
    finally:
        await background.drain(config.recorder.drain_timeout_seconds,
                               config.recorder.claim_idle_seconds)
        if memory is not None:
            memory.close()
        await step("store connection", memory_redis.aclose())
        await step("recorder store connection", recorder_redis.aclose())
        if tracing is not None:  # the last spans out (a blocking export: off the loop)
            await asyncio.to_thread(tracing.shutdown)
        logger.info(json.dumps({"event": "worker_stopped",
                                "recorder_applied": background.recorder.applied}))


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
    whatever its threads' nice values: those weigh only inside the group. Measured on a core
    shared with the server (bench/overhead, persistence on, 300 turns): the worker took 54 %
    of it at nice 10, and SCHED_IDLE changed nothing. So such a process also nices its
    autogroup (which then holds only itself and its children); one started from a shell does
    not, since its group is the shell's session."""
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
