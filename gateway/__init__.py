"""Context Gateway: an OpenAI-compatible memory gateway.

The tree by role, lowest layer first (tests/unit/test_layers.py holds the order):
`core/` pure decisions · `config/` typed config and tenants · `ops/` logs, metrics, tracing ·
`store/` and `upstream/` adapters (`store/recording/`: the recorder) · `memory/` records,
search, recall (request path) and jobs (worker) · `pipeline/` one request · `wiring.py` builds
a process · `http/` the server's handlers and console, `worker.py` the worker process ·
`cli.py` the `gateway` command.
"""

from gateway import _offline  # noqa: F401  (must run before anything imports litellm/tiktoken)

__version__ = "0.1.0"
