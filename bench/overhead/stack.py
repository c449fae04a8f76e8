"""The servers under test and how to address them: the fake upstream, the gateway (through
litellm to the fake) and LiteLLM's proxy (to the same fake), each with its config written to a
temporary directory.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bench.overhead.processes import ChildServer, ChildServers, Pinning, free_port, \
    stop_pidfile_process

TARGETS = ("direct", "gateway-passthrough", "gateway-memory", "litellm-proxy")
MODEL = "echo"
UPSTREAM_KEY_ENV = "BENCH_UPSTREAM_KEY"
MASTER_KEY_ENV = "BENCH_LITELLM_MASTER_KEY"
HOST = "127.0.0.1"

# Context policy of the bench tenant: 50 stored turns of ~100-token messages (~10k tokens) do
# not fit 8000 - 1000, so the rewrite really drops old turns on every memory request.
CONTEXT = {"max_context_tokens": 8000, "reserve_completion_tokens": 1000,
           "max_recent_turns": 50, "truncate_message_tokens": 1000}


@dataclass(frozen=True)
class Target:
    """Where one target's requests go and with which headers (the body is the same for all)."""

    name: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Stack:
    """The running servers; `targets` maps a target name to how to call it."""

    workdir: Path
    pinning: Pinning
    workers: int
    fake_url: str = ""
    gateway_url: str = ""
    litellm_url: str = ""
    gateway_key: str = field(default_factory=lambda: "bench-" + secrets.token_hex(8))
    litellm_key: str = field(default_factory=lambda: "sk-bench-" + secrets.token_hex(8))
    servers: ChildServers = field(default_factory=ChildServers)

    def start(self, names: tuple[str, ...]) -> None:
        """Start what `names` need: always the fake; the gateway and/or LiteLLM's proxy."""
        self._start_fake()
        if any(n.startswith("gateway") for n in names):
            self._start_gateway()
        if "litellm-proxy" in names:
            self._start_litellm()

    def stop(self) -> None:
        self.servers.stop_all()
        stop_pidfile_process(self.workdir / "gateway-data" / "redis.pid")

    def target(self, name: str, *, conversation: str | None = None,
               persist: bool = False) -> Target:
        auth = {"Authorization": f"Bearer {self.gateway_key}"}
        if name == "direct":
            return Target(name, f"{self.fake_url}/v1/chat/completions")
        if name == "gateway-passthrough":
            return Target(name, f"{self.gateway_url}/v1/chat/completions", auth)
        if name == "gateway-memory":
            assert conversation, "gateway-memory needs a conversation id"
            return Target(name, f"{self.gateway_url}/v1/chat/completions",
                          {**auth, "X-Conversation-Id": conversation,
                           "X-Gateway-Persist": "true" if persist else "false"})
        if name == "litellm-proxy":
            return Target(name, f"{self.litellm_url}/v1/chat/completions",
                          {"Authorization": f"Bearer {self.litellm_key}"})
        raise ValueError(f"unknown target {name!r}; expected one of {', '.join(TARGETS)}")

    # -- servers ---------------------------------------------------------------------------

    def _bin(self, name: str) -> str:
        return str(Path(sys.executable).parent / name)

    def _start_fake(self) -> None:
        port = free_port()
        self.fake_url = f"http://{HOST}:{port}"
        self.servers.start(ChildServer(
            "fake-upstream",
            self.pinning.prefix(self.pinning.load_core)
            + [self._bin("gateway"), "fake-upstream", "--host", HOST, "--port", str(port)],
            f"{self.fake_url}/healthz", self.workdir / "fake-upstream.log"))

    def _start_gateway(self) -> None:
        port = free_port()
        self.gateway_url = f"http://{HOST}:{port}"
        config = self.workdir / "gateway.yaml"
        config.write_text(json.dumps(gateway_config(
            self.workdir / "gateway-data", self.fake_url, self.gateway_key), indent=2))
        self.servers.start(ChildServer(
            "gateway",
            self.pinning.prefix(self.pinning.server_core)
            + [self._bin("gateway"), "serve", "--config", str(config), "--host", HOST,
               "--port", str(port), "--workers", str(self.workers), "--log-level", "info"],
            f"{self.gateway_url}/readyz", self.workdir / "gateway.log",
            env={UPSTREAM_KEY_ENV: "dummy-upstream-key"}, cwd=self.workdir))

    def _start_litellm(self) -> None:
        port = free_port()
        self.litellm_url = f"http://{HOST}:{port}"
        config = self.workdir / "litellm.yaml"
        config.write_text(json.dumps(litellm_config(self.fake_url), indent=2))
        self.servers.start(ChildServer(
            "litellm-proxy",
            self.pinning.prefix(self.pinning.server_core)
            + [self._bin("litellm"), "--config", str(config), "--host", HOST,
               "--port", str(port), "--num_workers", str(self.workers)],
            f"{self.litellm_url}/health/liveliness", self.workdir / "litellm.log",
            env={MASTER_KEY_ENV: self.litellm_key, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                 "LITELLM_DONT_SHOW_FEEDBACK_BOX": "True", "LITELLM_MODE": "PRODUCTION",
                 "LITELLM_LOG": "ERROR"},
            cwd=self.workdir, startup_timeout=120.0))


def gateway_config(data_dir: Path, fake_url: str, key: str) -> dict[str, object]:
    """The bench gateway: embedded store, one tenant, the alias `echo` through litellm to the
    fake upstream (as a real provider would be reached). JSON is valid YAML."""
    return {
        "server": {"data_dir": str(data_dir)},
        "store": "embedded",
        "tenants": {"bench": {
            "api_keys": [{"sha256": hashlib.sha256(key.encode()).hexdigest()}],
            "models": {MODEL: {"model": f"openai/{MODEL}", "api_base": f"{fake_url}/v1",
                               "api_key_env": UPSTREAM_KEY_ENV}},
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
