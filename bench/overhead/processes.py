"""Child servers of a benchmark run: started on free loopback ports, optionally pinned to a core,
waited for until they answer, and always stopped — politely first, then by force.

Every child gets its own session (process group), so a Ctrl-C in the terminal reaches only the
benchmark, which then stops its children in order; nothing is left running. A benchmark that
starts processes (these, embedded stores, gateway processes) calls `stop_children_on_sigterm()`
first, so a SIGTERM stops it the same way.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import NoReturn


def stop_children_on_sigterm() -> None:
    """Make a SIGTERM stop this process as Ctrl-C does: a KeyboardInterrupt in the main thread,
    so every `with` and `finally` that stops a child (servers, stores, gateway processes) runs
    before it exits. Later SIGTERMs are ignored: they would cut that clean-up short (each of
    its steps is bounded). Only the main thread can take a signal: elsewhere (a benchmark's
    main() run on another thread) it does nothing."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupted)


def _interrupted(signum: int, frame: FrameType | None) -> NoReturn:
    signal.signal(signum, signal.SIG_IGN)
    raise KeyboardInterrupt(f"signal {signum}")


def free_port(host: str = "127.0.0.1") -> int:
    """A loopback port free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


STORE_PLACES = ("load", "server")
"""Where the gateway's embedded store runs: beside the load generator and the fake upstream (the
server core is then the gateway's alone, as LiteLLM's proxy has it), or on the server core."""


@dataclass(frozen=True)
class Pinning:
    """Which cores the server under test, the load side (generator + fake upstream) and the
    gateway's store use.

    `None` cores mean no pinning (fewer than two cores, or no `taskset`)."""

    server_core: int | None
    load_core: int | None
    store_core: int | None = None

    @property
    def used(self) -> bool:
        return self.server_core is not None

    @classmethod
    def detect(cls, enabled: bool = True, store: str = "load") -> Pinning:
        if store not in STORE_PLACES:
            raise ValueError(f"store placement {store!r}; expected one of {STORE_PLACES}")
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        if not enabled or len(cores) < 2 or shutil.which("taskset") is None:
            return cls(None, None, None)
        server, load = cores[-1], cores[0]
        return cls(server_core=server, load_core=load,
                   store_core=load if store == "load" else server)

    def prefix(self, core: int | None) -> list[str]:
        """The argv prefix that pins a child to `core` (empty without pinning)."""
        return [] if core is None else ["taskset", "-c", str(core)]

    def pin_self(self) -> None:
        """Pin this process (the load generator) to the load core."""
        if self.load_core is not None:
            os.sched_setaffinity(0, {self.load_core})


def pin_threads(pid: int, core: int) -> int:
    """Move every thread of a running process to `core` (a child started by another child
    inherits its parent's core; `sched_setaffinity(pid)` alone would move only its main
    thread). Returns the number of threads moved."""
    moved = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), {core})
            moved += 1
        except (ProcessLookupError, PermissionError):
            continue
    return moved


def descendants(pid: int) -> list[int]:
    """Pids of every live process below `pid` (children, their children ...), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in sorted(children.get(todo.pop(), [])):
            found.append(child)
            todo.append(child)
    return found


def cpu_seconds(pid: int) -> float:
    """CPU time `pid` has used so far (user + system, all its threads); 0 once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state is field 3
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def describe_process(pid: int, role: str) -> dict[str, object]:
    """{role, pid, command, cpus}: where a process may run (the union over its threads)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        tasks = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:
        return {"role": role, "pid": pid, "command": "(exited)", "cpus": []}
    command = " ".join(os.fsdecode(a) for a in argv if a)[:160]
    cpus: set[int] = set()
    for task in tasks:
        try:
            cpus |= os.sched_getaffinity(task)
        except OSError:  # the thread ended meanwhile
            continue
    return {"role": role, "pid": pid, "command": command, "cpus": sorted(cpus)}


@dataclass
class ChildServer:
    """One server process: `argv` is started by `start()` and must answer `ready_url` with 200."""

    name: str
    argv: list[str]
    ready_url: str
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    startup_timeout: float = 60.0
    stop_timeout: float = 20.0
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, **self.env}, cwd=self.cwd, start_new_session=True)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self._proc.returncode} during "
                                   f"start-up; see {self.log_path}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.ready_url, timeout=1.0) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} not ready after {self.startup_timeout:.0f} s "
                           f"({self.ready_url}); see {self.log_path}:\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGINT (graceful: the gateway drains and stops its store), then SIGTERM, then SIGKILL
        of the child's own process group."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        for sig, grace in ((signal.SIGINT, self.stop_timeout), (signal.SIGTERM, 5.0),
                           (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig) if sig == signal.SIGKILL else proc.send_signal(sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(grace)
                break
            except subprocess.TimeoutExpired:
                continue
        try:  # leftovers in the group (e.g. worker processes) once the leader is gone
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class ChildServers:
    """Started servers, stopped in reverse order on exit — also on errors and Ctrl-C."""

    def __init__(self) -> None:
        self._started: list[ChildServer] = []

    def start(self, server: ChildServer) -> ChildServer:
        self._started.append(server)  # before start(): a half-started child is stopped too
        server.start()
        return server

    def stop_all(self) -> None:
        while self._started:
            self._started.pop().stop()

    def __enter__(self) -> ChildServers:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop_all()


def stop_pidfile_process(pidfile: Path) -> None:
    """Stop a grandchild that outlived its parent (the gateway's embedded store), by the pid
    its own pid file names. Does nothing if the file is gone or the process has ended."""
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
