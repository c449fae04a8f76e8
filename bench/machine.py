"""What a benchmark ran on, in the same shape in every results file."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict[str, Any]:
    """{"cores", "cpu_model", "python" (the version), "platform"}."""
    return {"cores": os.cpu_count(), "cpu_model": cpu_model(),
            "python": platform.python_version(), "platform": platform.platform()}


def rss_mb(pid: int) -> float | None:
    """Resident set size of `pid` in MB (VmRSS), None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None
