"""The servers under test and how to address them: the fake upstream, the gateway (through
litellm to the fake) and LiteLLM's proxy (to the same fake), each with its config written to a
temporary directory.

Children run the `gateway` package of the checkout this bench is in (`SOURCE_ROOT`, put first
on their PYTHONPATH and used as `python -m gateway`), not whatever the venv's editable install
points at: a bench run from a worktree measures that worktree.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bench.overhead.processes import (ChildServer, ChildServers, Pinning, cpu_seconds,
                                      descendants, describe_process, free_port, pin_threads,
                                      stop_pidfile_process)

TARGETS = ("direct", "gateway-passthrough", "gateway-memory", "gateway-memory-anthropic",
           "gateway-memory-responses", "litellm-proxy", "litellm-proxy-forwarded")
DIALECT_PATHS = {"gateway-memory": ("chat", "/v1/chat/completions"),
                 "gateway-memory-anthropic": ("anthropic", "/v1/messages"),
                 "gateway-memory-responses": ("responses", "/v1/responses")}
"""The memory targets: the same conversation through each door, in that door's wire form."""
MODEL = "echo"
CAPTURE_MODEL = "echo-messages"
"""The fake's behaviour that answers with the messages it was sent: what the gateway forwarded."""
UPSTREAM_KEY_ENV = "BENCH_UPSTREAM_KEY"
MASTER_KEY_ENV = "BENCH_LITELLM_MASTER_KEY"
HOST = "127.0.0.1"
SOURCE_ROOT = Path(__file__).resolve().parents[2]

# Context policy of the bench tenant: 50 stored turns of ~65-token messages (~7.1k tokens) do
# not fit 8000 - 1000 with the question, so the rewrite really drops old turns and recalls them
# (as the ~6,900-token history of issue 10's measurement did); 300 turns are ~42k tokens.
CONTEXT = {"max_context_tokens": 8000, "reserve_completion_tokens": 1000,
           "max_recent_turns": 50, "truncate_message_tokens": 1000}


def child_env() -> dict[str, str]:
    """Environment additions that make `python -m gateway` import this checkout's package."""
    paths = [str(SOURCE_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                  if p and Path(p).resolve() != SOURCE_ROOT]
    return {"PYTHONPATH": os.pathsep.join(paths), "PYTHONUNBUFFERED": "1"}


def default_litellm() -> str:
    """LiteLLM's proxy command: $BENCH_LITELLM, else `litellm` of this Python's environment
    (the project's `bench` extra installs `litellm[proxy]` there)."""
    return os.environ.get("BENCH_LITELLM") or str(Path(sys.executable).parent / "litellm")


def litellm_version(command: str) -> str:
    """The litellm version of the environment `command` (a console script) runs in."""
    try:
        first = Path(command).read_text(errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return "unknown"
    python = first[2:].strip() if first.startswith("#!") else sys.executable
    try:
        return subprocess.run(
            [python, "-c", "from importlib.metadata import version; print(version('litellm'))"],
            capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def source_info() -> dict[str, object]:
    """Which code the children run: the checkout's path, commit and whether it has changes."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(SOURCE_ROOT), *args], capture_output=True,
                                  text=True, timeout=10, check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    return {"path": str(SOURCE_ROOT), "commit": git("rev-parse", "HEAD") or "unknown",
            "branch": git("rev-parse", "--abbrev-ref", "HEAD") or "unknown",
            "uncommitted_changes": bool(git("status", "--porcelain", "--untracked-files=no"))}


@dataclass(frozen=True)
class Target:
    """Where one target's requests go and with which headers."""

    name: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    dialect: str = "chat"
    """The wire form its bodies are sent in (chat, anthropic, responses)."""


@dataclass
class Stack:
    """The running servers and how to call them."""

    workdir: Path
    pinning: Pinning
    workers: int
    litellm: str = field(default_factory=default_litellm)
    """LiteLLM's proxy command (a `litellm` console script with the proxy extras)."""
    fake_url: str = ""
    gateway_url: str = ""
    litellm_url: str = ""
    gateway_key: str = field(default_factory=lambda: "bench-" + secrets.token_hex(8))
    litellm_key: str = field(default_factory=lambda: "sk-bench-" + secrets.token_hex(8))
    servers: ChildServers = field(default_factory=ChildServers)
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def data_dir(self) -> Path:
        return self.workdir / "gateway-data"

    @property
    def store_socket(self) -> Path:
        """The embedded store's unix socket (gateway.store.embedded)."""
        return self.data_dir / "redis.sock"

    def start(self, names: tuple[str, ...]) -> None:
        """Start the fake and the gateway (always: it prepares the conversations and shows what
        it forwards), and LiteLLM's proxy if a litellm target is asked for."""
        self._start_fake()
        self._start_gateway()
        self._place_store()
        if any(n.startswith("litellm-proxy") for n in names):
            self._start_litellm()

    def stop(self) -> None:
        self.servers.stop_all()
        stop_pidfile_process(self.data_dir / "redis.pid")

    def target(self, name: str, *, conversation: str | None = None, user: str | None = None,
               persist: bool = False, model: str = MODEL) -> Target:
        auth = {"Authorization": f"Bearer {self.gateway_key}"}
        if name == "direct":
            return Target(name, f"{self.fake_url}/v1/chat/completions")
        if name == "gateway-passthrough":
            return Target(name, f"{self.gateway_url}/v1/chat/completions", auth)
        if name in DIALECT_PATHS:
            assert conversation and user, f"{name} needs a conversation and a user"
            dialect, path = DIALECT_PATHS[name]
            return Target(name, f"{self.gateway_url}{path}",
                          {**auth, "X-Conversation-Id": conversation, "X-User-Id": user,
                           "X-Gateway-Persist": "true" if persist else "false"}, dialect)
        if name in ("litellm-proxy", "litellm-proxy-forwarded"):
            return Target(name, f"{self.litellm_url}/v1/chat/completions",
                          {"Authorization": f"Bearer {self.litellm_key}"})
        raise ValueError(f"unknown target {name!r}; expected one of {', '.join(TARGETS)}")

    def conversation_url(self, conversation: str) -> str:
        return f"{self.gateway_url}/v1/memory/conversations/{conversation}"

    def placement(self) -> list[dict[str, object]]:
        """Every process of the run and the cores it may use, as it is right now."""
        out = [describe_process(os.getpid(), "load generator (this process)")]
        for role, pid in self.pids.items():
            out.append(describe_process(pid, role))
            for child in descendants(pid):
                if child not in self.pids.values():
                    out.append(describe_process(child, f"{role}: child"))
        return out

    def gateway_cpu(self) -> dict[str, float]:
        """CPU seconds used so far by the gateway's server process, its worker child(ren) and
        its embedded store."""
        server = self.pids.get("gateway", 0)
        store = self.pids.get("store (embedded Valkey)", 0)
        workers = [p for p in descendants(server) if p not in self.pids.values()] if server \
            else []
        return {"server": cpu_seconds(server) if server else 0.0,
                "worker": sum(cpu_seconds(p) for p in workers),
                "store": cpu_seconds(store) if store else 0.0}

    # -- servers ---------------------------------------------------------------------------

    def _gateway_argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "gateway", *args]

    def _start_fake(self) -> None:
        port = free_port()
        self.fake_url = f"http://{HOST}:{port}"
        fake = self.servers.start(ChildServer(
            "fake-upstream",
            self.pinning.prefix(self.pinning.load_core)
            + self._gateway_argv("fake-upstream", "--host", HOST, "--port", str(port)),
            f"{self.fake_url}/healthz", self.workdir / "fake-upstream.log", env=child_env()))
        self.pids["fake upstream"] = fake.pid or 0

    def _start_gateway(self) -> None:
        port = free_port()
        self.gateway_url = f"http://{HOST}:{port}"
        config = self.workdir / "gateway.yaml"
        config.write_text(json.dumps(gateway_config(
            self.data_dir, self.fake_url, self.gateway_key), indent=2))
        gateway = self.servers.start(ChildServer(
            "gateway",
            self.pinning.prefix(self.pinning.server_core)
            + self._gateway_argv("serve", "--config", str(config), "--host", HOST,
                                 "--port", str(port), "--workers", str(self.workers),
                                 "--log-level", "info"),
            f"{self.gateway_url}/readyz", self.workdir / "gateway.log",
            env={**child_env(), UPSTREAM_KEY_ENV: "dummy-upstream-key"}, cwd=self.workdir))
        self.pids["gateway"] = gateway.pid or 0

    def _place_store(self) -> None:
        """The embedded store is the gateway's child and inherits its core; move it (all its
        threads) to the store core chosen for the run."""
        try:
            pid = int((self.data_dir / "redis.pid").read_text().strip())
        except (OSError, ValueError):
            return  # not embedded, or not running: nothing to place
        self.pids["store (embedded Valkey)"] = pid
        if self.pinning.store_core is not None:
            pin_threads(pid, self.pinning.store_core)

    def _start_litellm(self) -> None:
        port = free_port()
        self.litellm_url = f"http://{HOST}:{port}"
        config = self.workdir / "litellm.yaml"
        config.write_text(json.dumps(litellm_config(self.fake_url), indent=2))
        server = ChildServer(
            "litellm-proxy",
            self.pinning.prefix(self.pinning.server_core)
            + [self.litellm, "--config", str(config), "--host", HOST,
               "--port", str(port), "--num_workers", str(self.workers)],
            f"{self.litellm_url}/health/liveliness", self.workdir / "litellm.log",
            env={MASTER_KEY_ENV: self.litellm_key, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                 "LITELLM_DONT_SHOW_FEEDBACK_BOX": "True", "LITELLM_MODE": "PRODUCTION",
                 "LITELLM_LOG": "ERROR"},
            cwd=self.workdir, startup_timeout=120.0)
        try:
            litellm = self.servers.start(server)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}\n(LiteLLM's proxy needs `litellm[proxy]`: install the "
                               "project's `bench` extra, or pass --litellm PATH / set "
                               "BENCH_LITELLM to a `litellm` command that has it)") from None
        self.pids["litellm proxy"] = litellm.pid or 0


def gateway_config(data_dir: Path, fake_url: str, key: str) -> dict[str, object]:
    """The bench gateway: embedded store, one tenant, the alias `echo` to the fake upstream as
    an OpenAI-compatible provider (as a real one would be reached), and `echo-messages` beside
    it to see what the gateway forwards. JSON is valid YAML."""
    route = {"api_base": f"{fake_url}/v1", "api_key_env": UPSTREAM_KEY_ENV}
    return {
        "server": {"data_dir": str(data_dir)},
        "store": "embedded",
        "tenants": {"bench": {
            "api_keys": [{"sha256": hashlib.sha256(key.encode()).hexdigest()}],
            "models": {name: {"model": f"openai/{name}", **route}
                       for name in (MODEL, CAPTURE_MODEL)},
            "context": CONTEXT,
        }},
    }


def litellm_config(fake_url: str) -> dict[str, object]:
    """LiteLLM's proxy with the same route, no database, nothing that calls out."""
    return {
        "model_list": [{"model_name": MODEL, "litellm_params": {
            "model": f"openai/{MODEL}", "api_base": f"{fake_url}/v1", "api_key": "dummy"}}],
        "general_settings": {"master_key": f"os.environ/{MASTER_KEY_ENV}"},
        "litellm_settings": {"telemetry": False, "drop_params": True},
    }
