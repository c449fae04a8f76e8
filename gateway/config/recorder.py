"""Where recorded turns are applied and memory is derived, and how hard a failed job is
retried (`recorder:`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gateway.config.strict import Strict


class RecorderConfig(Strict):
    mode: Literal["process", "external", "background", "inline"] = "process"
    """Where recorded turns are applied and memory is derived (gateway/worker.py):
    process: a worker process `gateway serve` starts beside the serving processes;
    external: none here — run `gateway worker` yourself (scale-out);
    background: tasks on each serving process's event loop (competes with requests);
    inline: each turn before the response returns (tests and debugging only)."""
    workers: int = Field(1, ge=1, le=32)
    process_nice: int = Field(10, ge=0, le=19)
    """How much lower the CPU priority of the worker process is than the server's (Unix
    `nice`): on a shared core, requests come first and memory work takes what is left."""
    max_attempts: int = Field(5, ge=1, le=100)
    backoff_seconds: float = Field(0.2, gt=0)
    claim_idle_seconds: float = Field(30.0, gt=0)
    drain_timeout_seconds: float = Field(10.0, ge=0)
    buffer_capacity: int = Field(10_000, ge=1, le=1_000_000)
    """Turns held in process while the store cannot take them (an outage), flushed in order
    when it is back; beyond this many, the oldest are dropped — logged and counted."""
    buffer_retry_max_seconds: float = Field(1.0, gt=0, le=300)
    """The longest pause between flush attempts while the store stays down."""
