"""Test helpers for servers on loopback (`serve` itself lives in gateway.inprocess)."""

from __future__ import annotations

import socket

from gateway.inprocess import serve

__all__ = ["closed_port", "serve"]


def closed_port(host: str = "127.0.0.1") -> int:
    """A loopback port nothing listens on (connection refused), for unreachable-upstream tests."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
