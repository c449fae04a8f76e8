"""The incremental BM25 index scores exactly as a fresh bm25s build over its live documents."""

from __future__ import annotations

import bm25s
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.memory.search.bm25 import Bm25

WORDS = st.sampled_from([f"w{i}" for i in range(30)] + ["北京", "京大", "x"])
DOCS = st.lists(st.lists(WORDS, max_size=15), min_size=1, max_size=40)


def reference(docs: list[list[str]], query: list[str]) -> np.ndarray:
    index = bm25s.BM25()
    index.index(docs, show_progress=False)
    ids = index.get_tokens_ids(query)
    return index.get_scores_from_ids(ids) if ids else np.zeros(len(docs), dtype=np.float32)


@settings(max_examples=150, deadline=None)
@given(docs=DOCS, removed=st.sets(st.integers(0, 39)), queries=st.lists(
    st.lists(WORDS, min_size=1, max_size=6), min_size=1, max_size=5))
def test_scores_equal_a_fresh_bm25s_build_after_adds_and_removals(docs, removed, queries):
    index = Bm25()
    rows = [index.add(doc) for doc in docs]
    assert rows == list(range(len(docs)))
    for row in removed & set(rows):
        index.remove(row)
        index.remove(row)  # idempotent
    live = [r for r in rows if r not in removed]
    assert index.live == len(live) and index.dead == len(docs) - len(live)
    for query in queries:
        scores = index.scores(query)
        assert scores.dtype == np.float32 and len(scores) == len(docs)
        assert not scores[list(removed & set(rows))].any()  # removed rows never score
        if any(docs[r] for r in live):
            expected = reference([docs[r] for r in live], query)
            np.testing.assert_allclose(scores[live], expected, rtol=1e-5, atol=1e-6)
        assert index.knows_any(query) == any(t in docs[r] for r in live for t in query)


def test_an_empty_index_and_unknown_tokens_score_nothing():
    index = Bm25()
    assert index.scores(["a"]).shape == (0,) and not index.knows_any(["a"])
    row = index.add(["a", "b", "a"])
    assert not index.knows_any(["zzz"]) and not index.scores(["zzz"]).any()
    index.remove(row)
    assert not index.knows_any(["a"]) and index.live == 0
    assert index.add(["a"]) == 1  # rows are never reused


def test_rows_grow_past_the_initial_capacity():
    index = Bm25()
    for n in range(300):
        index.add(["common"] + [f"t{n}"])
    scores = index.scores(["t299", "common"])
    assert scores.argmax() == 299 and len(scores) == 300
