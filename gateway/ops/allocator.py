"""The C allocator's settings for the gateway's long-running processes (glibc only).

glibc gives each thread that allocates its own arena (up to 8 per core) and raises its mmap
threshold each time a large block is freed, so the large buffers a serving process frees and
makes again — search indexes dropped and rebuilt, vectors, response bodies — end up in arenas
that are never given back to the system: its resident memory climbs while what it holds
stays bounded. `tune_allocator` caps the arenas at `ARENAS` and fixes the mmap threshold at
`MMAP_THRESHOLD` (a block that large or larger is mapped on its own and unmapped when freed)
for this process, through `mallopt`, and for the processes it starts, through the
environment variables glibc reads at their start. A variable the operator set is left as it
is (and glibc has applied it to this process already). Elsewhere (musl, macOS) it does
nothing. Why these values: docs/decisions.md, "The allocator's arenas".
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import MutableMapping

ARENAS = 2
MMAP_THRESHOLD = 128 * 1024
"""Bytes: glibc's initial threshold, kept instead of raised as blocks are freed."""

# mallopt parameters (glibc's malloc.h).
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_SETTINGS = (("MALLOC_ARENA_MAX", _M_ARENA_MAX, ARENAS),
             ("MALLOC_MMAP_THRESHOLD_", _M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def tune_allocator(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Apply the settings (see the module docstring) to this process and to `environ` (the
    process's environment by default); call before this process starts its threads. Returns
    the names of the settings applied to this process."""
    env = os.environ if environ is None else environ
    if not sys.platform.startswith("linux"):
        return []
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc
        return []
    applied = []
    for name, parameter, value in _SETTINGS:
        if name in env:
            continue
        env[name] = str(value)  # for the processes this one starts
        if mallopt(parameter, value) == 1:
            applied.append(name)
    return applied
