"""The benchmarks' cache of vectors (bench/locomo/vector_cache.py)."""

from __future__ import annotations

import numpy as np

from bench.locomo.vector_cache import CachedEmbedder, VectorCache
from gateway.memory.embedders.hashing import HashEmbedder


class Counting(HashEmbedder):
    """HashEmbedder that counts the texts it embeds."""

    def __init__(self) -> None:
        super().__init__()
        self.embedded: list[str] = []

    def embed(self, texts):
        self.embedded += list(texts)
        return super().embed(texts)


def test_a_cached_embedder_embeds_each_text_once_across_processes_and_runs(tmp_path) -> None:
    inner = Counting()
    first = CachedEmbedder(tmp_path, inner)
    vectors = first.embed(["a turn", "another turn", "a turn"])
    assert inner.embedded == ["a turn", "another turn"]
    assert np.array_equal(vectors, HashEmbedder().embed(["a turn", "another turn", "a turn"]))
    assert (first.hits, first.misses) == (0, 3)
    assert first.name == inner.name and first.dim == inner.dim
    side = first.save()  # a file of its own beside the cache: two children never clobber
    assert side is not None and side.parent == tmp_path and first.save() is None

    later = Counting()
    again = CachedEmbedder(tmp_path, later)  # the next run reads what the first wrote
    assert np.array_equal(again.embed(["another turn", "a turn"]), vectors[[1, 0]])
    assert later.embedded == [] and (again.hits, again.misses) == (2, 0)
    assert again.save() is None


def test_saving_the_cache_merges_the_files_written_beside_it(tmp_path) -> None:
    for text in ("one", "two"):
        writer = CachedEmbedder(tmp_path, HashEmbedder())
        writer.embed([text])
        writer.save()
    assert len(list(tmp_path.glob("hash-test.*.npz"))) == 2
    cache = VectorCache(tmp_path, Counting())
    assert cache.has("one") and cache.has("two") and not cache.has("three")
    cache.save()
    assert [p.name for p in tmp_path.iterdir()] == ["hash-test.npz"]
    merged = VectorCache(tmp_path, Counting())
    assert merged.has("one") and merged.has("two")


def test_queries_are_not_cached(tmp_path) -> None:
    inner = Counting()
    cached = CachedEmbedder(tmp_path, inner)
    cached.embed_query(["what did I say?"])
    cached.embed_query(["what did I say?"])
    assert inner.embedded == ["what did I say?"] * 2 and cached.save() is None
