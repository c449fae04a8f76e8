"""The issue's case, with real processes: a user is erased while the memory worker (the
`gateway worker` child of `gateway serve`) derives memory from their conversation and waits on
a slow step — a summariser whose LLM answers after 60 s. The erase answers `complete: true`
(the job saw the tombstone at its next heartbeat and was cancelled), and once the worker is
idle again no key of the bundled store and no file of its data directory holds the erased
text; another user's memory, made by the same worker afterwards, is there.

Real `gateway serve` with its worker process, the real bundled Valkey (append-only), the
in-process fake upstream (`fake/slow-60000` for the summariser)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import yaml

from gateway.config import hash_key
from gateway.core.ids import ConversationKey
from gateway.memory.records.keys import MemoryKeySpace
from tests.support.processes import Processes

KEY = "sk-erase-e2e"
ERIN, BOB = "erin-7Q", "bob-5K"


@pytest.fixture
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ef")  # short: the store's socket path must fit 107 bytes


def config_file(workdir: Path) -> Path:
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump({
        "store": "embedded",
        "server": {"data_dir": str(workdir / "data")},
        "recorder": {"workers": 2, "claim_idle_seconds": 1.5, "drain_timeout_seconds": 5},
        "memory": {"embedder": {"backend": "hash"}, "worker": {"poll_seconds": 0.05}},
        "tenants": {"acme": {
            "api_keys": [{"sha256": hash_key(KEY)}],
            "models": {"echo": {"model": "fake/echo"}, "summariser": {"model": "fake/slow-60000"}},
            "memory": {"summarizer_model": "summariser",
                       "compaction": {"min_rounds": 2, "recent_window_turns": 1,
                                      # under a span's length: the summariser is called
                                      "chunk_max_tokens": 20}},
        }},
    }))
    return path


def converse(url: str, user: str, texts: list[str]) -> None:
    """A stateless client: the whole history every call."""
    history: list[dict[str, Any]] = []
    with httpx.Client(timeout=30) as client:
        for text in texts:
            history.append({"role": "user", "content": text})
            response = client.post(url + "/v1/chat/completions", json={
                "model": "echo", "messages": history}, headers={
                "Authorization": f"Bearer {KEY}", "X-User-Id": user,
                "X-Conversation-Id": "chat"})
            assert response.status_code == 200, response.text
            reply = response.json()["choices"][0]["message"]
            history.append({"role": "assistant", "content": reply["content"]})


def texts(word: str) -> list[str]:
    return [f"My name is {word} Canary.", f"I live in {word}ville.",
            *(f"{word} note {i}: the {word} garden needs water on day {i}." for i in range(4))]


def wait_for(condition: Any, what: str, seconds: float = 60) -> Any:
    deadline = time.monotonic() + seconds
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


def keys_mentioning(store: redis.Redis, word: str) -> list[str]:
    found = []
    for name in store.scan_iter(count=1000):
        kind = store.type(name)
        value = {"string": lambda: store.get(name), "hash": lambda: store.hgetall(name),
                 "list": lambda: store.lrange(name, 0, -1),
                 "set": lambda: store.smembers(name),
                 "zset": lambda: store.zrange(name, 0, -1),
                 "stream": lambda: store.xrange(name, "-", "+"), "none": lambda: None}[kind]()
        if word.lower() in f"{name} {value!r}".lower():
            found.append(name)
    return sorted(found)


def files_mentioning(directory: Path, word: str) -> list[str]:
    found = []
    for path in directory.rglob("*"):
        try:
            if path.is_file() and word.encode() in path.read_bytes():
                found.append(str(path.relative_to(directory)))
        except FileNotFoundError:  # an increment file a rewrite dropped
            continue
    return sorted(found)


def test_an_erase_during_a_slow_memory_job_is_complete_and_nothing_comes_back(workdir):
    data = workdir / "data"
    lock = MemoryKeySpace().conversation(ConversationKey("acme", ERIN, "chat")).lock
    with Processes(workdir) as procs:
        gateway = procs.gateway(config_file(workdir))
        store = redis.Redis(unix_socket_path=str(data / "redis.sock"), decode_responses=True)
        try:
            converse(gateway.url, ERIN, texts("Zorblax"))
            # The worker holds Erin's conversation: its summariser call takes 60 s.
            wait_for(lambda: store.exists(lock), "the memory job on Erin's conversation")
            wait_for(lambda: files_mentioning(data, "Zorblax"), "the canary on disk")

            response = httpx.delete(gateway.url + "/v1/memory", timeout=60, headers={
                "Authorization": f"Bearer {KEY}", "X-User-Id": ERIN})
            assert response.status_code == 200, response.text
            assert response.json()["complete"] is True, response.json()
            assert not store.exists(lock)  # the job was stopped, not waited out

            # The worker goes on with Bob (his summaries wait on the slow model too: his turn
            # index, written first, shows the worker at work after the erase).
            converse(gateway.url, BOB, texts("Quillon"))
            wait_for(lambda: any(k.endswith(":m:turns")
                                 for k in keys_mentioning(store, "Quillon")),
                     "Bob's memory, made after the erase")
            assert keys_mentioning(store, "Zorblax") == []
            wait_for(lambda: not int(store.info("persistence")["aof_rewrite_in_progress"]),
                     "the rewrite after the erase")
            assert files_mentioning(data, "Zorblax") == []
        finally:
            store.close()
