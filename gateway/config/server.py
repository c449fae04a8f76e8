"""The serving processes: where they listen, how large a request may be, how they reach the
store, how they log and how long they wait at shutdown (`server:`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from gateway.config.strict import Strict


class ServerConfig(Strict):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)
    workers: int = Field(1, ge=1, le=64)
    data_dir: Path = Path("./data")
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    store_timeout_seconds: float = Field(2.0, gt=0)
    """A request-path store call slower than this fails open: the request goes through
    without memory (and its turn waits in the record buffer)."""
    store_pool_size: int = Field(100, ge=1, le=10_000)
    """Connections each worker process keeps to the store for requests and memory. When all
    are in use a request waits for one (at most store_timeout_seconds) instead of failing."""
    log_format: Literal["json", "text"] = "json"
    """json: every line the gateway's processes print is one JSON object (uvicorn's lines,
    warnings and tracebacks included); text: the message alone, uvicorn's own format."""
    shutdown_timeout_seconds: float = Field(30.0, gt=0, le=3600)
    """On SIGTERM: how long in-flight requests (streams included) may take to finish before
    they are cancelled; then the recorder and the record buffer are drained."""
    malloc_trim_seconds: float = Field(60.0, ge=0, le=86400)
    """Every this many seconds each process hands the memory its C allocator holds free back
    to the system (glibc's `malloc_trim`; nothing where the C library has none); 0: never."""
