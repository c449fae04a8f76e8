"""`gateway reindex` end to end: a store populated through the real gateway with one
embedder, the config switched to another of the same dimension, the command run as its own
process, then status and recall in the new vector space."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import redis as sync_redis
import yaml

from gateway.config import hash_key, parse_config
from gateway.core.ids import ConversationKey
from gateway.memory.embedders.hashing import HashEmbedder
from gateway.memory.search.embedding import EmbeddingService
from gateway.memory.records.keys import MemoryKeySpace
from gateway.memory.ports import Namespace
from gateway.memory.jobs.reindex import Reindexer, ReindexRunning, ReindexStatus
from gateway.memory.search.vector_index import FaissVectorIndex
from gateway.memory.records.vector_store import encode_vector, space_of, vector_space
from tests.support.gateway import running_gateway

ROOT = Path(__file__).resolve().parents[2]
KEY, USER = "acme-key", "alice-3F"
KEYS = MemoryKeySpace()
OLD, NEW = HashEmbedder(), HashEmbedder(variant="b")


def config_data(store: str, data_dir: Path, embedder: dict[str, Any]) -> dict[str, Any]:
    return {"store": store, "recorder": {"mode": "inline"},
            "server": {"data_dir": str(data_dir)},
            "memory": {"embedder": embedder},
            "tenants": {"acme": {
                "api_keys": [{"sha256": hash_key(KEY)}],
                "models": {"echo": {"model": "fake/echo"}},
                "context": {"max_context_tokens": 2000, "reserve_completion_tokens": 200},
                "memory": {"compaction": {"min_rounds": 2, "recent_window_turns": 1}}}}}


def converse(url: str, conversation: str, texts: list[str]) -> None:
    history: list[dict[str, Any]] = []
    for text in texts:
        history.append({"role": "user", "content": text})
        response = httpx.post(url + "/v1/chat/completions", timeout=30,
                              json={"model": "echo", "messages": history},
                              headers={"Authorization": f"Bearer {KEY}", "X-User-Id": USER,
                                       "X-Conversation-Id": conversation})
        assert response.status_code == 200, response.text
        reply = response.json()["choices"][0]["message"]
        history.append({k: v for k, v in reply.items() if v is not None})


def vectors_by_space(url: str) -> dict[str, dict[str, int]]:
    """Per vectors hash of the store: how many vectors each space has."""
    client = sync_redis.Redis.from_url(url, decode_responses=True)
    try:
        out: dict[str, dict[str, int]] = {}
        for key in client.scan_iter(match="*vectors*"):
            if client.type(key) != "hash":
                continue
            for value in client.hvals(key):
                space = vector_space(value)
                out.setdefault(key, {}).setdefault(space, 0)
                out[key][space] += 1
        return out
    finally:
        client.close()


def reindex(config_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "gateway", "reindex", "--config",
                           str(config_path), *extra], capture_output=True, text=True,
                          timeout=120, env=env, cwd=ROOT)


async def test_reindex_moves_a_populated_store_to_the_new_embedder(redis_url, redis_client,
                                                                   tmp_path):
    with running_gateway(parse_config(config_data(redis_url, tmp_path, {"backend": "hash"}))) \
            as url:
        converse(url, "c-one", ["My name is Zorblax.", "I live in Lisbon near the river.",
                                *(f"Note {i}: the garden needs water on day {i}."
                                  for i in range(5))])
        converse(url, "c-two", ["My tortoise Sheldon eats strawberries.",
                                "Sheldon is twelve years old."])
    before = vectors_by_space(redis_url)
    kinds = {k.rsplit(":", 1)[-1] for k in before}
    assert {"vectors", "fact_vectors", "recall_vectors"} <= kinds, before
    assert all(set(spaces) == {space_of(OLD)} for spaces in before.values())
    total = sum(sum(s.values()) for s in before.values())

    new_config = tmp_path / "new.yaml"
    new_config.write_text(yaml.safe_dump(config_data(redis_url, tmp_path,
                                                     {"backend": "hash", "model": "b"})))
    status = reindex(new_config, "--status")
    assert status.returncode == 0, status.stderr
    assert "tenant acme: never re-indexed" in status.stdout

    # The new embedder's index sees nothing of the old space meanwhile (lexical only).
    conversation = Namespace.of_conversation(ConversationKey("acme", USER, "c-two"))
    index = FaissVectorIndex(redis_client, NEW.dim, KEYS, space=space_of(NEW))
    query = NEW.embed(["What does Sheldon eat?"])[0]
    try:
        assert await index.search(conversation, query, 5) == []

        done = reindex(new_config)
        assert done.returncode == 0, done.stderr
        after = vectors_by_space(redis_url)
        assert after.keys() == before.keys()
        assert all(set(spaces) == {space_of(NEW)} for spaces in after.values()), after
        assert sum(sum(s.values()) for s in after.values()) == total

        status = reindex(new_config, "--status")
        assert status.returncode == 0, status.stderr
        line = status.stdout.strip().splitlines()[-1]
        assert line.startswith("tenant acme: done, ") and f"{total} vectors re-embedded" in line
        assert "hash-test:b" in line

        # Recall works in the new space: the index of the same process refreshes.
        hits = await index.search(conversation, query, 5)
        assert hits, "the re-embedded turns are searched"
        turn = await redis_client.hget(KEYS.conversation(
            ConversationKey("acme", USER, "c-two")).turns, hits[0][0])
        assert "Sheldon" in turn
        # The user namespace too (from another conversation, excluding the current one).
        user_hits = await index.search(Namespace.of_user("acme", USER), query, 5,
                                       excluding="c-one")
        assert user_hits and all(i.startswith("c-two/") for i, _ in user_hits)

        # Resumable: a second run finds nothing left to do.
        again = reindex(new_config)
        assert again.returncode == 0, again.stderr
        assert "0 vectors re-embedded" in again.stdout.strip().splitlines()[-1]
    finally:
        index.close()

    # The gateway started with the new embedder recalls densely: the new conversation's
    # request brings the old conversation's turn.
    with running_gateway(parse_config(config_data(redis_url, tmp_path,
                                                  {"backend": "hash", "model": "b"}))) as url:
        response = httpx.post(url + "/v1/chat/completions", timeout=30,
                              json={"model": "echo", "messages": [
                                  {"role": "user", "content": "What does Sheldon eat?"}]},
                              headers={"Authorization": f"Bearer {KEY}", "X-User-Id": USER,
                                       "X-Conversation-Id": "c-three"})
        assert response.status_code == 200
        assert int(response.headers.get("x-gateway-memory-recalled", "0")) > 0


async def test_reindex_never_overwrites_a_vector_written_meanwhile(redis_client):
    # The memory worker (already on the new embedder) re-wrote one vector after the re-index
    # read the namespace: the swap leaves it as the worker wrote it.
    key = ConversationKey("acme", USER, "c-one")
    k = KEYS.conversation(key)
    old_vectors = {"chunk:a": encode_vector(OLD.embed(["apples"])[0], space_of(OLD)),
                   "chunk:b": encode_vector(OLD.embed(["pears"])[0], space_of(OLD))}
    await redis_client.hset(k.vectors, mapping=old_vectors)
    worker_wrote = encode_vector(NEW.embed(["plums"])[0], space_of(NEW))
    await redis_client.hset(k.vectors, "chunk:b", worker_wrote)
    embedding = EmbeddingService(NEW)
    try:
        reindexer = Reindexer(redis_client, embedding, KEYS)
        swapped = await reindexer._replace(k.vectors, k.version, old_vectors,
                                           {"chunk:a": "apples", "chunk:b": "pears"})
    finally:
        embedding.close()
    assert swapped == 1
    stored = await redis_client.hgetall(k.vectors)
    assert stored["chunk:b"] == worker_wrote
    assert vector_space(stored["chunk:a"]) == space_of(NEW)
    np.testing.assert_allclose(
        np.frombuffer(__import__("base64").b64decode(stored["chunk:a"].split(":", 1)[1]),
                      dtype=np.float32), NEW.embed(["apples"])[0])


async def test_a_run_whose_process_died_reads_as_interrupted_and_a_second_run_waits(
        redis_client):
    embedding = EmbeddingService(NEW)
    try:
        reindexer = Reindexer(redis_client, embedding, KEYS)
        await redis_client.set(reindexer.status_key("acme"), ReindexStatus(
            "acme", NEW.name, space_of(NEW), namespaces_total=3, namespaces_done=1).to_json())
        status = await reindexer.status("acme")
        assert status is not None and status.state == "interrupted"
        # While a run holds the tenant's lock, another one does not start.
        await redis_client.set(reindexer.status_key("acme") + ":lock", "x")
        assert (await reindexer.status("acme")).state == "running"
        with pytest.raises(ReindexRunning):
            await reindexer.run("acme")
    finally:
        embedding.close()
