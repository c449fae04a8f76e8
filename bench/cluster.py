"""What a chat request costs the store, on one Valkey and on a 3-master Valkey cluster.

`python -m bench cluster --out bench/results/cluster.json` (a markdown table beside it).
Real parts: the gateway in process over HTTP (`recorder.mode: background`: the recorder and
the memory worker on the serving loop, as a worker process would run them; the run ends when
both queues are empty, so everything the requests caused in the store is counted, the
workers' polling of every shard's queues included), memory on with the test embedder, the
fake `echo` upstream, and
valkey-server processes on loopback (gateway/store/local_cluster.py) — one plain server, then
three cluster primaries. `users` identified users each hold one stateful conversation of
`turns` turns, sent one request at a time. Per store:
- `commands_per_request`: calls counted by the server(s) (INFO commandstats) / requests;
- `store_cpu_ms_per_request`: the server processes' CPU (INFO cpu, user + sys) / requests,
  all nodes together (a cluster's include its nodes' gossip and housekeeping, and the
  workers' polling of every shard's queues); `busiest_node_cpu_ms_per_request`: the node
  doing most — the figure that decides when the store is full: a Redis serves commands on
  one core, so a node tops out near 1000 / this many requests per second;
- `p50_ms` / `p99_ms`: the client's latency per request (one at a time, everything on the
  same host), which shows what the cluster client costs the request path;
- `keys_per_node`: where the data landed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import redis

from bench.machine import machine
from bench.output import write_result
from bench.overhead.processes import stop_children_on_sigterm
from gateway.http.app import create_app
from gateway.config import hash_key, parse_config
from gateway.inprocess import serve
from gateway.store.keys import KeySpace
from gateway.store.local_cluster import ValkeyCluster

API_KEY = "bench-key"


def _config(url: str, shards: int) -> Any:
    return parse_config({
        "store": url, "recorder": {"mode": "background"},
        **({"store_cluster": {"enabled": True, "shards": shards}} if shards else {}),
        "memory": {"embedder": {"kind": "hash"}},
        "server": {"data_dir": tempfile.mkdtemp(prefix="cgcluster-")},
        "tenants": {"bench": {"api_keys": [{"sha256": hash_key(API_KEY)}],
                              "models": {"echo": {"model": "fake/echo"}},
                              "context": {"max_context_tokens": 4000,
                                          "reserve_completion_tokens": 200}}}})


# The bench's own reads (the drain check, INFO, the cluster client's topology queries): not
# counted. The gateway sends these only for /metrics scrapes, which this run makes none of.
_NOT_COUNTED = ("cmdstat_xlen", "cmdstat_xinfo|groups", "cmdstat_zcard", "cmdstat_info",
                "cmdstat_cluster|", "cmdstat_command|", "cmdstat_ping")


def _totals(nodes: ValkeyCluster) -> tuple[int, list[float]]:
    """Commands served by all nodes; CPU seconds of each node."""
    calls = sum(int(v["calls"]) for stats in nodes.info("commandstats")
                for k, v in stats.items()
                if isinstance(v, dict) and not k.startswith(_NOT_COUNTED))
    cpu = [float(c["used_cpu_user"]) + float(c["used_cpu_sys"]) for c in nodes.info("cpu")]
    return calls, cpu


def _drained(url: str, shards: int, timeout: float = 120) -> None:
    """Wait until every shard's record stream is empty with nothing pending in its group and
    no conversation waits for memory (read with XLEN, XINFO GROUPS, ZCARD only: `_totals`
    leaves them out)."""
    keys = KeySpace(shards=shards)
    client = redis.RedisCluster.from_url(url) if shards else redis.Redis.from_url(url)
    deadline = time.monotonic() + timeout
    with client:
        while time.monotonic() < deadline:
            time.sleep(0.5)
            waiting = 0
            for shard in keys.shard_ids():
                waiting += client.xlen(keys.records_at(shard))
                waiting += sum(int(g["pending"]) for g in
                               client.xinfo_groups(keys.records_at(shard)))
                waiting += client.zcard(keys.memory_dirty_at(shard))
            if not waiting:
                return
    raise RuntimeError("the record and memory queues did not drain")


def measure(nodes: ValkeyCluster, shards: int, users: int, turns: int) -> dict[str, Any]:
    latencies = []
    with serve(create_app(_config(nodes.url, shards))) as url, \
            httpx.Client(base_url=url, timeout=30) as client:
        def ask(user: int, n: int) -> None:
            response = client.post("/v1/chat/completions", json={
                "model": "echo", "messages": [{"role": "user", "content":
                                               f"turn {n}: my bicycle {user} is blue #{n}"}]},
                headers={"Authorization": f"Bearer {API_KEY}", "X-User-Id": f"user-{user}",
                         "X-Conversation-Id": f"c-{user}"})
            response.raise_for_status()

        ask(-1, 0)  # warm-up: connections, scripts loaded
        calls_before, cpu_before = _totals(nodes)
        started = time.perf_counter()
        for n in range(turns):
            for user in range(users):
                started = time.perf_counter()
                ask(user, n)
                latencies.append((time.perf_counter() - started) * 1000)
        _drained(nodes.url, shards)
        calls_after, cpu_after = _totals(nodes)
        elapsed = time.perf_counter() - started
    requests = users * turns
    per_node = [(a - b) * 1000 / requests for a, b in zip(cpu_after, cpu_before)]
    latencies.sort()
    return {"store": f"{len(nodes.ports)} cluster primaries, {shards} shards" if shards
            else "1 server", "requests": requests,
            "commands_per_request": round((calls_after - calls_before) / requests, 1),
            "store_cpu_ms_per_request": round(sum(per_node), 3),
            "busiest_node_cpu_ms_per_request": round(max(per_node), 3),
            "elapsed_s": round(elapsed, 1),
            "p50_ms": round(statistics.median(latencies), 2),
            "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1], 2),
            "keys_per_node": [len(k) for k in nodes.keys().values()]}


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = ["# A chat request's cost to the store: one Valkey vs a 3-master cluster", "",
             f"{m['cores']} cores, {m['cpu_model']}, Python {m['python']}; "
             f"{result['users']} users x {result['turns']} turns, one request at a time, "
             "memory on (test embedder), recorder and memory worker in the background "
             "(counted until both queues are empty).", "",
             "| store | requests | commands / request | store CPU ms / request (all nodes) "
             "| busiest node CPU ms / request | p50 ms | p99 ms | keys per node |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    lines += [f"| {r['store']} | {r['requests']} | {r['commands_per_request']} | "
              f"{r['store_cpu_ms_per_request']} | {r['busiest_node_cpu_ms_per_request']} | "
              f"{r['p50_ms']} | {r['p99_ms']} | {' / '.join(map(str, r['keys_per_node']))} |"
              for r in result["rows"]]
    one = result["rows"][0]["store_cpu_ms_per_request"]
    lines += ["", f"One Redis serves commands on one core: at {one} ms of its CPU per request "
              f"it tops out near {round(1000 / one) if one else 'n/a'} requests/s "
              "(all replicas together), before the host's other work takes its share."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    stop_children_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/cluster.json"))
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--shards", type=int, default=16)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="cgcluster-") as tmp:
        for shards in (0, args.shards):
            nodes = ValkeyCluster(Path(tmp) / str(shards), 3 if shards else 1,
                                  cluster=bool(shards))
            nodes.start()
            try:
                rows.append(measure(nodes, shards, args.users, args.turns))
            finally:
                nodes.stop()
    result = {"benchmark": "cluster", "machine": machine(), "users": args.users,
              "turns": args.turns, "rows": rows}
    write_result(args.out, result, markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
