"""The servers `bench agent` drives: the fake upstream (`python -m gateway fake-upstream`) and a
gateway (`python -m gateway serve`, embedded store in a temporary data dir) whose tenant routes
`agent-chat` to the fake's `agent` as an OpenAI-compatible provider and `agent-claude` to it as
Anthropic's Messages API, at one window (`context.max_context_tokens`; None: the shipped
default, no context settings at all). Child processes run this checkout's `gateway`
(bench/overhead/stack.py: `child_env`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

from bench.agent.drive import Endpoints
from bench.overhead.processes import ChildServer, ChildServers, free_port, stop_pidfile_process
from bench.overhead.stack import child_env

HOST = "127.0.0.1"
KEY_ENV = "BENCH_AGENT_UPSTREAM_KEY"
ALIASES = {"chat": "agent-chat", "anthropic": "agent-claude"}


def gateway_config(data_dir: Path, fake_url: str, key: str, window: int | None
                   ) -> dict[str, Any]:
    """JSON (valid YAML) of the bench gateway's config."""
    tenant: dict[str, Any] = {
        "api_keys": [{"sha256": hashlib.sha256(key.encode()).hexdigest()}],
        "models": {ALIASES["chat"]: {"model": "openai/agent", "api_base": f"{fake_url}/v1",
                                     "api_key_env": KEY_ENV},
                   ALIASES["anthropic"]: {"model": "anthropic/agent", "api_base": fake_url,
                                          "api_key_env": KEY_ENV}},
    }
    if window is not None:
        tenant["context"] = {"max_context_tokens": window}
    return {"server": {"data_dir": str(data_dir)}, "store": "embedded",
            "tenants": {"bench": tenant}}


@contextlib.contextmanager
def running(window: int | None, workdir: Path | None = None
            ) -> Iterator[dict[str, Endpoints]]:
    """The fake and a gateway at `window`; yields each dialect's endpoints."""
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-agent-")))
        data_dir = workdir / "gateway-data"
        stack.callback(stop_pidfile_process, data_dir / "redis.pid")  # after the servers stop
        servers = stack.enter_context(ChildServers())
        python = [sys.executable, "-m", "gateway"]
        fake_port, gateway_port = free_port(), free_port()
        fake_url = f"http://{HOST}:{fake_port}"
        gateway_url = f"http://{HOST}:{gateway_port}"
        servers.start(ChildServer("fake-upstream", python + [
            "fake-upstream", "--host", HOST, "--port", str(fake_port)],
            f"{fake_url}/healthz", workdir / "fake-upstream.log", env=child_env()))
        key = "bench-agent-" + secrets.token_hex(8)
        config = workdir / "gateway.yaml"
        config.write_text(json.dumps(gateway_config(data_dir, fake_url, key, window), indent=2))
        servers.start(ChildServer("gateway", python + [
            "serve", "--config", str(config), "--host", HOST, "--port", str(gateway_port),
            "--workers", "1"], f"{gateway_url}/readyz", workdir / "gateway.log",
            env={**child_env(), KEY_ENV: "dummy-upstream-key"}, cwd=workdir))
        yield {dialect: Endpoints(gateway_url, fake_url, key, alias)
               for dialect, alias in ALIASES.items()}
