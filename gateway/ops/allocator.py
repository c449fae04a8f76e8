"""Handing the C allocator's free memory back to the system, every so often.

glibc's malloc keeps what a process frees in its heaps for later allocations and returns it to
the system only from the top of a heap; a gateway process that builds and drops search indexes
and decodes large store replies ends up holding much freed memory that way. `malloc_trim(0)`
returns every whole free page of every heap. `Trimmer` calls it every `interval` seconds on
a thread of its own (the call leaves the interpreter, so the event loop runs meanwhile); where
the C library has no `malloc_trim` (musl, macOS) there is no trimmer. What it is worth:
docs/decisions.md, "Free memory handed back every minute".
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
from typing import Callable

logger = logging.getLogger("gateway.allocator")


def malloc_trim() -> Callable[[], object] | None:
    """The C library's `malloc_trim(0)` as a function, or None where it has none."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # no such library, or a C library without it
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: trim(0)


class Trimmer:
    """Calls `trim` every `interval` seconds on its own thread, from `start()` until
    `stop()`; counts its calls."""

    def __init__(self, trim: Callable[[], object], interval: float):
        if interval <= 0:
            raise ValueError("interval must be positive")
        self.trim = trim
        self.interval = interval
        self.calls = 0
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="malloc-trim", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ends the thread (a call under way finishes first)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stopping.wait(self.interval):
            try:
                self.trim()
            except Exception:  # noqa: BLE001 — a failed trim costs memory, never the process
                logger.exception("malloc_trim failed; memory is no longer trimmed")
                return
            self.calls += 1


def start_trimmer(interval: float) -> Trimmer | None:
    """A started trimmer calling `malloc_trim` every `interval` seconds; None when `interval`
    is 0 or the C library has no `malloc_trim`."""
    trim = malloc_trim() if interval > 0 else None
    if trim is None:
        return None
    trimmer = Trimmer(trim, interval)
    trimmer.start()
    return trimmer
