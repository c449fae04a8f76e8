"""Real processes for the scale-out and failure tests: redis-server, gateways, the fake upstream.

    with Processes(tmp_path) as procs:
        redis = procs.redis()                          # redis-server, AOF on, free port
        a = procs.gateway(gateway_config_file(...))    # `python -m gateway serve`, ready
        ...
        redis.restart()                                # same port, same data dir
        a.kill()                                       # kill -9 of its whole process group

Every process gets its own session (process group) and is stopped when the `with` block ends,
also on failures and Ctrl-C: politely (SIGTERM) first, then SIGKILL of its group. Logs go to
files under the test's temp dir; `log_text()` reads them for assertions and failure messages.
Nothing here mocks anything: these are the binaries a deployment runs.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, Iterable

import pytest
import redis
import yaml

from gateway.config import hash_key
from gateway.core.ids import ANONYMOUS_USER, ConversationKey
from gateway.core.messages import StoredMessage
from gateway.store import connect
from gateway.store.keys import KeySpace
from gateway.store.redis_store import RedisStore

REPO = Path(__file__).resolve().parents[2]
API_KEY = "replica-test-key"
TENANT = "acme"
AUTH = {"Authorization": f"Bearer {API_KEY}"}


def require_redis_server() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("Debian's redis-server is not installed (CI installs it: .ci/run)")
    return binary


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Child:
    """One child process in its own session, output to `log_path`."""

    def __init__(self, name: str, argv: list[str], log_path: Path,
                 env: dict[str, str] | None = None):
        self.name, self.argv, self.log_path = name, argv, log_path
        self.env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def spawn(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, cwd=REPO,
                                         env={**os.environ, **self.env},
                                         start_new_session=True)

    def signal(self, sig: int) -> None:
        if self.running:
            os.killpg(self.pid, sig)

    def kill(self) -> None:
        """kill -9 of the whole group (a gateway's uvicorn workers too); waits for it."""
        if self.proc is None:
            return
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)

    def terminate(self, timeout: float = 30.0) -> int | None:
        """SIGTERM to the leader, wait up to `timeout` s; returns the exit code (None: it had
        to be killed). Leftovers of its group are killed either way."""
        if self.proc is None:
            return None
        code: int | None = self.proc.poll()
        if code is None:
            try:
                self.proc.send_signal(signal.SIGCONT)  # a paused process cannot exit
                self.proc.terminate()
                code = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                code = None
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait(10)
        return code

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


class RedisServer(Child):
    """Debian's redis-server on a loopback port, AOF on (fsync always), data in `directory`."""

    def __init__(self, binary: str, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        super().__init__("redis-server", [
            binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "yes", "--appendfsync", "always", "--dir", str(directory),
            "--daemonize", "no"], directory / "redis.log")

    def start(self, timeout: float = 15.0) -> None:
        self.spawn()
        deadline = time.monotonic() + timeout
        while True:
            try:
                with redis.Redis.from_url(self.url, socket_timeout=1) as client:
                    client.ping()  # raises BusyLoadingError while the AOF loads
                return
            except redis.RedisError:
                if not self.running or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start:\n{self.log_tail()}")
                time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM (the AOF is flushed), as an operator's stop or a crash-safe restart."""
        self.terminate(15)

    def restart(self) -> None:
        self.stop()
        self.start()


class GatewayProcess(Child):
    """`python -m gateway serve` on a free loopback port."""

    def __init__(self, config: Path, log_path: Path, *, workers: int = 1):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        super().__init__(f"gateway:{self.port}", [
            sys.executable, "-m", "gateway", "serve", "--config", str(config), "--host",
            "127.0.0.1", "--port", str(self.port), "--workers", str(workers)], log_path,
            env={"PYTHONUNBUFFERED": "1"})

    def start(self, timeout: float = 60.0) -> None:
        self.spawn()
        wait_http(self.url + "/readyz", timeout, self)


class FakeUpstreamProcess(Child):
    """`python -m gateway fake-upstream` on a free loopback port."""

    def __init__(self, log_path: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        super().__init__("fake-upstream", [sys.executable, "-m", "gateway", "fake-upstream",
                                           "--port", str(self.port)], log_path)

    def start(self, timeout: float = 60.0) -> None:
        self.spawn()
        wait_http(self.url + "/healthz", timeout, self)


def wait_http(url: str, timeout: float, child: Child) -> None:
    """Poll `url` until it answers 200; fail with the child's log if it dies or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not child.running:
            raise RuntimeError(f"{child.name} exited during start-up:\n{child.log_tail()}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{child.name} not ready after {timeout:.0f}s:\n{child.log_tail()}")


class Processes:
    """Starts children on demand; stops all of them, newest first, on exit."""

    def __init__(self, directory: Path):
        self.directory = directory
        self._children: list[Child] = []
        self._count = 0

    def _log(self, name: str) -> Path:
        self._count += 1
        return self.directory / f"{self._count:02d}-{name}.log"

    def redis(self) -> RedisServer:
        server = RedisServer(require_redis_server(), self.directory / "redis")
        self._children.append(server)
        server.start()
        return server

    def gateway(self, config: Path, *, workers: int = 1, start: bool = True) -> GatewayProcess:
        gateway = GatewayProcess(config, self._log("gateway"), workers=workers)
        self._children.append(gateway)
        if start:
            gateway.start()
        return gateway

    def fake_upstream(self) -> FakeUpstreamProcess:
        fake = FakeUpstreamProcess(self._log("fake-upstream"))
        self._children.append(fake)
        fake.start()
        return fake

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        while self._children:
            self._children.pop().terminate(15)


def gateway_config_file(path: Path, store: str, *, models: dict[str, Any] | None = None,
                        recorder: dict[str, Any] | None = None,
                        server: dict[str, Any] | None = None,
                        context: dict[str, Any] | None = None, shards: int = 0) -> Path:
    """A config for real gateway processes: tenant `acme` (key API_KEY), the in-process fake
    models `echo`, `messages`, `slow` (`fake/slow-300`) and `stream-slow` (800 ms), the test
    embedder; recorder: 2 workers per process, entries reclaimed after 1.5 s idle.
    `shards`: `store` is a Redis Cluster node, users hashed into that many shards."""
    config = {
        "store": store,
        **({"store_cluster": {"enabled": True, "shards": shards}} if shards else {}),
        "server": {"data_dir": str(path.parent / "data"), **(server or {})},
        "recorder": {"workers": 2, "claim_idle_seconds": 1.5, "drain_timeout_seconds": 5,
                     **(recorder or {})},
        "memory": {"embedder": {"kind": "hash"}},
        "tenants": {TENANT: {
            "api_keys": [{"sha256": hash_key(API_KEY)}],
            "models": models or {"echo": {"model": "fake/echo"},
                                 "messages": {"model": "fake/echo-messages"},
                                 "slow": {"model": "fake/slow-300"},
                                 "stream-slow": {"model": "fake/slow-800"}},
            "context": {"max_context_tokens": 4000, "reserve_completion_tokens": 200,
                        **(context or {})},
        }},
    }
    path.write_text(yaml.safe_dump(config))
    return path


STORES = ["redis-server", "valkey-cluster"]
"""The shared stores the scale-out and failure tests run against (`shared_store`)."""
CLUSTER_SHARDS = 8


def shared_store(procs: Processes, kind: str, request: pytest.FixtureRequest
                 ) -> tuple[str, int]:
    """(URL, shards) of a store for real gateway processes: a redis-server of `procs`
    (shards 0), or the session's 3-master Valkey cluster, flushed (tests/support/cluster.py)."""
    if kind == "redis-server":
        return procs.redis().url, 0
    return request.getfixturevalue("cluster_url"), CLUSTER_SHARDS


def conversation(name: str) -> ConversationKey:
    """The conversation `name` of the test tenant: anonymous, or with a name "<c>@<user>" of
    that user (sent as X-User-Id by `send_turn`: users spread over a cluster's shards)."""
    return ConversationKey(TENANT, user_of(name) or ANONYMOUS_USER, name)


def user_of(name: str) -> str | None:
    return name.rpartition("@")[2] if "@" in name else None


def _client(url: str, shards: int, **options: Any) -> Any:
    """A sync client of the store: a cluster client if `shards`."""
    if shards:
        return redis.RedisCluster.from_url(url, decode_responses=True, **options)
    return redis.Redis.from_url(url, decode_responses=True, **options)


async def _transcripts(url: str, names: Iterable[str], shards: int
                       ) -> dict[str, tuple[StoredMessage, ...]]:
    client = connect(url, cluster=bool(shards))
    try:
        store = RedisStore(client, KeySpace(shards=shards))
        return {name: await store.load(conversation(name)) for name in names}
    finally:
        await client.aclose()


def transcripts(url: str, names: Iterable[str], *, shards: int = 0
                ) -> dict[str, tuple[StoredMessage, ...]]:
    """Each conversation as a request would see it (applied transcript + pending turns)."""
    return asyncio.run(_transcripts(url, names, shards))


def wait_all_applied(url: str, names: Iterable[str], timeout: float = 30.0, *,
                     shards: int = 0) -> float:
    """Poll until no turn of `names` is pending and no record group (one per shard) holds an
    entry, delivered or not yet read; returns the seconds it took. Fails after `timeout`."""
    keys = KeySpace(shards=shards)
    names = list(names)
    started = time.monotonic()
    with _client(url, shards) as client:
        while True:
            pending = sum(client.hlen(keys.conversation(conversation(n)).pending)
                          for n in names)
            group = 0
            for shard in keys.shard_ids():
                group += _unacknowledged(client, keys.records_at(shard), keys.group)
            if pending == 0 and group == 0:
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise AssertionError(f"{pending} turns still pending, {group} entries "
                                     f"unacknowledged after {timeout:.0f}s")
            time.sleep(0.05)


def _unacknowledged(client: Any, stream: str, group: str) -> int:
    """Entries of `stream` that `group` has not acknowledged: delivered and pending, plus one
    when some are not read yet (XPENDING alone misses a job enqueued but not yet read)."""
    try:
        last = client.xinfo_stream(stream)["last-generated-id"]
        info = next((g for g in client.xinfo_groups(stream) if g["name"] == group), None)
    except redis.ResponseError:
        return 0  # no stream yet: nothing was enqueued
    if info is None:
        return 1  # entries, and no group has read them yet
    return int(info["pending"]) + (info["last-delivered-id"] != last)


def _consumer_infos(url: str, shards: int) -> list[dict[str, Any]]:
    """The consumers of every shard's record group (one group without a cluster)."""
    keys = KeySpace(shards=shards)
    infos: list[dict[str, Any]] = []
    with _client(url, shards, socket_timeout=2) as client:
        for shard in keys.shard_ids():
            try:
                infos += client.xinfo_consumers(keys.records_at(shard), keys.group)
            except redis.ResponseError:
                pass
    return infos


def pending_for(url: str, consumer_prefix: str, *, shards: int = 0) -> int:
    """Entries of the record groups pending for consumers whose names start with the prefix."""
    return sum(int(i["pending"]) for i in _consumer_infos(url, shards)
               if i["name"].startswith(consumer_prefix))


def consumers(url: str, *, shards: int = 0) -> list[str]:
    return sorted({i["name"] for i in _consumer_infos(url, shards)})


def report(name: str, **counts: Any) -> str:
    """One line of counts, printed and kept for the terminal summary (tests/conftest.py)."""
    line = f"{name}: " + " ".join(f"{k}={v}" for k, v in counts.items())
    REPORTS.append(line)
    print(line)
    return line


REPORTS: list[str] = []
"""Count lines of this session's failure tests; the terminal summary prints them."""


class Ledger:
    """Every turn the clients sent, by conversation, and what became of its request."""

    def __init__(self) -> None:
        self.completed: dict[str, list[int]] = {}
        self.failed: dict[str, list[int]] = {}
        self.errors: list[str] = []

    def sent(self, conversation_name: str, n: int, ok: bool, error: str = "") -> None:
        (self.completed if ok else self.failed).setdefault(conversation_name, []).append(n)
        if not ok:
            self.errors.append(error)

    @property
    def names(self) -> list[str]:
        return sorted(set(self.completed) | set(self.failed))

    def check(self, stored: dict[str, tuple[StoredMessage, ...]]) -> dict[str, int]:
        """Counts: completed turns stored once / lost / duplicated; failed requests whose turn
        was stored anyway; turns out of order; messages nobody sent."""
        counts = dict(completed=0, stored=0, lost=0, duplicated=0, failed_requests=0,
                      failed_but_stored=0, out_of_order=0, unknown=0, replies_missing=0)
        for name in self.names:
            messages = stored.get(name, ())
            texts = [m.message.text for m in messages if m.message.role == "user"]
            numbers = []
            for text in texts:
                prefix, _, n = text.rpartition("#")
                if prefix != name or not n.isdigit():
                    counts["unknown"] += 1
                    continue
                numbers.append(int(n))
            counts["out_of_order"] += sum(1 for a, b in zip(numbers, numbers[1:]) if b <= a)
            for n in self.completed.get(name, []):
                seen = numbers.count(n)
                counts["completed"] += 1
                counts["stored"] += seen == 1
                counts["lost"] += seen == 0
                counts["duplicated"] += seen > 1
            for n in self.failed.get(name, []):
                seen = numbers.count(n)
                counts["failed_requests"] += 1
                counts["failed_but_stored"] += seen >= 1
                counts["duplicated"] += seen > 1
            sent = set(self.completed.get(name, [])) | set(self.failed.get(name, []))
            counts["unknown"] += sum(1 for n in numbers if n not in sent)
            # Each completed turn's user message is directly followed by its echoed reply.
            for i, m in enumerate(messages):
                if m.message.role != "user":
                    continue
                n = m.message.text.rpartition("#")[2]
                if not (n.isdigit() and int(n) in self.completed.get(name, [])):
                    continue
                nxt = messages[i + 1] if i + 1 < len(messages) else None
                if nxt is None or nxt.message.role != "assistant" \
                        or nxt.message.text != m.message.text:
                    counts["replies_missing"] += 1
        return counts


def turn_text(conversation_name: str, n: int) -> str:
    return f"{conversation_name}#{n}"


def chat_body(conversation_name: str, n: int, *, model: str = "echo",
              stream: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [
        {"role": "user", "content": turn_text(conversation_name, n)}]}
    if stream:
        body["stream"] = True
    return body


async def send_turn(client: Any, base_url: str, conversation_name: str, n: int, *,
                    model: str = "echo", stream: bool = False) -> tuple[bool, str]:
    """One stateful turn through the gateway (httpx.AsyncClient); (completed, error). A
    stream counts as completed only if it ended with `data: [DONE]` and no error event."""
    body = chat_body(conversation_name, n, model=model, stream=stream)
    headers = {**AUTH, "X-Conversation-Id": conversation_name}
    if user_of(conversation_name):
        headers["X-User-Id"] = user_of(conversation_name)
    url = base_url + "/v1/chat/completions"
    if not stream:
        response = await client.post(url, json=body, headers=headers)
        if response.status_code != 200:
            return False, f"HTTP {response.status_code}: {response.text[:200]}"
        text = response.json()["choices"][0]["message"]["content"]
        return text == turn_text(conversation_name, n), "" if text else "empty reply"
    async with client.stream("POST", url, json=body, headers=headers) as response:
        payload = b"".join([chunk async for chunk in response.aiter_bytes()])
    if response.status_code != 200:
        return False, f"HTTP {response.status_code}: {payload[:200]!r}"
    ok = payload.rstrip().endswith(b"data: [DONE]") and b'"error"' not in payload
    return ok, "" if ok else f"stream cut short: {payload[-120:]!r}"
