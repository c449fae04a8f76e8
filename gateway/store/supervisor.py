"""The embedded store kept running: a thread of the process that started it restarts it after
a crash, on the same data dir, socket and append-only file.

Who does what under `gateway serve`: the `serve` process starts the store (`store_url`) before
its serving processes and its worker process, so the server is its child — only it can reap
the server when it dies, so only it supervises (`StoreSupervisor`, a thread beside uvicorn).
The serving processes and the worker only hold connections to the socket: while the store is
down their commands fail at once (the socket is gone), requests are served without memory
(fail open), turns wait in each serving process's record buffer and the recorder backs off;
once the server answers again their next command connects anew and the buffer flushes into
it — the same path as after an outage of an external Redis. `gateway worker` with its own
embedded store supervises it the same way.

Invariants:
- the server's death is noticed within `check_seconds` and the dead child reaped (no zombie);
  a server this process adopted (not its child) is watched through /proc;
- a restart replays the AOF: every write the server acknowledged before it died is kept (a
  kill of the process loses no write(2) already made; only a machine crash could);
- restarts back off: the first after a crash is immediate; a failed start, or a server that
  ends again within `stable_seconds` of its restart, doubles the pause from
  `backoff_initial_seconds` up to `backoff_max_seconds`;
- a server that this process neither started nor adopted (another process's, shared) is
  left alone while it answers; if its socket goes absent, this process starts one (the start
  lock makes sure only one process does) and owns it from then on;
- `stop()` ends the thread (after a restart in progress, bounded by its timeout) before the
  caller stops the store, so the store is never restarted behind a stop.

Events (JSON log lines, logger `gateway.store.embedded`): `embedded_store_ended` (ERROR: pid,
how it ended), `embedded_store_restarted` (WARNING: new pid, seconds down, attempts),
`embedded_store_restart_failed` (ERROR: the error, the next pause).
"""

from __future__ import annotations

import logging
import threading
import time

from gateway.ops.logs import JsonMessage
from gateway.store.embedded import EmbeddedRedis, EmbeddedRedisError

log = logging.getLogger("gateway.store.embedded")


class StoreSupervisor:
    """Restarts `store` whenever it ends, until `stop()`. Pass a store whose `die_with_parent`
    is False (the gateway's): a server started from this thread with it True would get
    SIGTERM when the thread ends."""

    def __init__(self, store: EmbeddedRedis, *, check_seconds: float = 0.25,
                 restart_timeout: float = 60.0, backoff_initial_seconds: float = 1.0,
                 backoff_max_seconds: float = 30.0, stable_seconds: float = 60.0):
        self.store = store
        self.check_seconds = check_seconds
        self.restart_timeout = restart_timeout
        self.backoff_initial = backoff_initial_seconds
        self.backoff_max = max(backoff_max_seconds, backoff_initial_seconds)
        self.stable_seconds = stable_seconds
        self.restarts = 0
        self._pause = 0.0
        self._back_at: float | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("store supervisor already started")
        self._thread = threading.Thread(target=self._run, name="store-supervisor",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End supervision; a restart under way finishes first (within its timeout)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(self.restart_timeout + 5)

    def __enter__(self) -> StoreSupervisor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stopping.wait(self.check_seconds):
            try:
                how = self._gone()
                if how is not None:
                    self._restart(how)
            except Exception:  # noqa: BLE001 — the thread must outlive a bug; logged, retried
                log.exception("store supervisor: unexpected error; checking again")
                self._stopping.wait(self.backoff_initial)

    def _gone(self) -> str | None:
        """How the store ended, if it did (reaping it); None while a server answers."""
        how = self.store.ended()
        if how is not None or self.store.owns:
            return how
        if self.store.probe() == "absent":
            return "the shared server is gone (its socket does not answer)"
        return None

    def _restart(self, how: str) -> None:
        down_since = time.monotonic()
        if self._back_at is not None and down_since - self._back_at < self.stable_seconds:
            self._pause = min(max(self._pause * 2, self.backoff_initial), self.backoff_max)
        else:
            self._pause = 0.0  # it ran stably (or never crashed before): restart at once
        log.error(JsonMessage(event="embedded_store_ended", how=how,
                              socket=str(self.store.socket_path), restart_in_s=self._pause))
        attempts = 0
        while not self._stopping.wait(self._pause):
            attempts += 1
            try:
                started = self.store.start(self.restart_timeout)
            except (EmbeddedRedisError, OSError) as exc:
                self._pause = min(max(self._pause * 2, self.backoff_initial), self.backoff_max)
                log.error(JsonMessage(event="embedded_store_restart_failed", attempt=attempts,
                                      error=str(exc), retry_in_s=self._pause))
                continue
            self.restarts += 1
            self._back_at = time.monotonic()
            log.warning(JsonMessage(event="embedded_store_restarted", pid=self.store.pid,
                                    started=started, attempts=attempts,
                                    down_s=round(self._back_at - down_since, 2),
                                    restarts=self.restarts))
            return
