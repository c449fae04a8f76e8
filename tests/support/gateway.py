"""Running the real gateway over HTTP on loopback, against a real store, for tests."""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import shutil
import tempfile
from typing import Any, Iterator

from gateway.http.app import create_app
from gateway.config import Config, hash_key, parse_config
from gateway.core.ids import ANONYMOUS_USER, ConversationKey
from gateway.ports import Upstream
from tests.support.servers import serve

KEYS = {"acme": "acme-key", "globex": "globex-key"}
MODELS = {
    "echo": {"model": "fake/echo"},
    "messages": {"model": "fake/echo-messages"},
    "rate-limited": {"model": "fake/error-429"},
    "broken": {"model": "fake/error"},
    "slow": {"model": "fake/slow-300"},
}


def gateway_config(store: str, *, context: dict[str, Any] | None = None,
                   recorder: dict[str, Any] | None = None,
                   models: dict[str, Any] | None = None, tenant: dict[str, Any] | None = None,
                   per_tenant: dict[str, dict[str, Any]] | None = None, **top: Any) -> Config:
    """Every tenant of KEYS with the fake models (plus `models`), `context` and the keys of
    `tenant` (e.g. `memory`), and tenant `name` also those of `per_tenant[name]`; `top`: the
    config's other top-level keys."""
    common = {"models": {**MODELS, **(models or {})},
              "context": context or {"max_context_tokens": 2000, "reserve_completion_tokens": 200},
              **(tenant or {})}
    # The test embedder: memory works the same, without loading a model per app start.
    top.setdefault("memory", {"embedder": {"kind": "hash"}})
    # A data dir of its own: a record journal written at one test's shutdown (its store gone)
    # must never be replayed into another test's store, nor left in the working tree.
    top["server"] = {"data_dir": data_dir(), **top.get("server", {})}
    return parse_config({
        "store": store,
        "recorder": recorder or {"mode": "inline"},
        "tenants": {name: {**common, **(per_tenant or {}).get(name, {}),
                           "api_keys": [{"sha256": hash_key(key)}]}
                    for name, key in KEYS.items()},
        **top,
    })


def data_dir() -> str:
    """A temporary data dir for one gateway, removed when the test process exits (a gateway may
    write its record journal there until its test ends)."""
    path = tempfile.mkdtemp(prefix="gateway-test-")
    atexit.register(functools.partial(shutil.rmtree, path, ignore_errors=True))
    return path


@contextlib.contextmanager
def running_gateway(config: Config, upstream: Upstream | None = None) -> Iterator[str]:
    """The gateway served by uvicorn on a free loopback port; yields its base URL."""
    with serve(create_app(config, upstream=upstream)) as base_url:
        yield base_url


def conversation_key(conversation: str, tenant: str = "acme",
                     user: str = ANONYMOUS_USER) -> ConversationKey:
    return ConversationKey(tenant, user, conversation)


def forwarded(reply_text: str) -> list[dict[str, Any]]:
    """The messages the `fake/echo-messages` upstream received, from its reply."""
    return json.loads(reply_text)
