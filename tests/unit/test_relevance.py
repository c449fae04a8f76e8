"""Recall's absolute relevance and its floor (gateway/core/recall/relevance.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.config.context import ContextConfig
from gateway.config.memory import TenantMemoryConfig
from gateway.core.recall.recollection import Recollection
from gateway.core.recall.need import Need
from gateway.core.recall.relevance import above_floor, relevances, with_relevance
from gateway.memory.embedders.hashing import HashEmbedder
from gateway.memory.recall.service import RecallSettings, search_need


def item(i: str, kind: str = "turn") -> Recollection:
    return Recollection(kind, i, f"text {i}", (i,), int(i[1:]) if i[1:].isdigit() else 0,
                        1.0)  # type: ignore[arg-type]


def relevance(items: tuple[Recollection, ...]) -> dict[str, float | None]:
    return {r.id: r.relevance for r in items}


def test_an_item_is_as_relevant_as_its_own_dense_similarity_or_its_neighbours():
    items = [item("t1"), item("t2"), item("t3"), item("t9")]
    marked = with_relevance(items, {"t1": 0.7, "t3": 0.2, "t9": 0.1, "t5": 0.05},
                            [("t1", "t2"), ("t2", "t3")])
    # t2 was no dense hit: it is the answer after t1 (and the context before t3).
    assert relevance(marked) == {"t1": 0.7, "t2": 0.7, "t3": 0.2, "t9": 0.1}


IDS = st.sampled_from([f"t{n}" for n in range(8)])


@given(st.lists(IDS, max_size=8), st.dictionaries(IDS, st.floats(-1, 1), max_size=8),
       st.lists(st.tuples(IDS, IDS), max_size=12))
def test_relevance_is_the_best_of_its_own_and_its_direct_neighbours_similarity(ids, sims,
                                                                              pairs):
    # Spelled out from the definition: a neighbour's neighbour never counts.
    lowest = min(sims.values(), default=0.0)
    expected = {i: max([sims.get(i, lowest)]
                       + [sims.get(b if a == i else a, lowest) for a, b in pairs if i in (a, b)])
                for i in ids} if sims else {}
    assert relevances(ids, sims, pairs) == expected


def test_an_item_found_lexically_only_gets_the_lowest_dense_hits_similarity():
    marked = with_relevance([item("t4")], {"t1": 0.6, "t2": 0.3}, [])
    assert relevance(marked) == {"t4": 0.3}


def test_without_dense_hits_relevance_is_unknown_and_the_floor_keeps_the_item():
    marked = with_relevance([item("t1")], {}, [("t1", "t2")])
    assert relevance(marked) == {"t1": None}
    assert above_floor(marked, 0.9) == marked


def test_the_floor_drops_only_what_is_below_it_and_keeps_order_and_fields():
    items = with_relevance([item("t3"), item("t1"), item("t2")],
                           {"t1": 0.5, "t2": 0.15, "t3": 0.16}, [])
    kept = above_floor(items, 0.16)
    assert [r.id for r in kept] == ["t3", "t1"]
    assert kept[0] == items[0] and kept[1] == items[1]


@pytest.mark.parametrize("floor", [None, -1.0])
def test_no_floor_forwards_everything(floor):
    items = with_relevance([item("t1"), item("t2")], {"t1": -0.2, "t2": 0.0}, [])
    assert above_floor(items, floor) == items


def test_facts_and_unmarked_items_pass_any_floor():
    fact = Recollection("fact", "fact:home", "user lives in Lisbon", (), -1, 0.4)
    assert above_floor([fact], 0.99) == (fact,)


def test_when_no_item_reaches_the_gate_none_is_forwarded_but_unknown_ones():
    fact = Recollection("fact", "fact:home", "user lives in Lisbon", (), -1, 0.4)
    items = (fact,) + with_relevance([item("t1"), item("t2")], {"t1": 0.24, "t2": 0.2}, [])
    assert above_floor(items, 0.16, gate=0.25) == (fact,)
    assert [r.id for r in above_floor(items, 0.21, gate=0.24)] == ["fact:home", "t1"]
    assert above_floor(items, None, gate=None) == items


def test_what_clears_the_gate_sizes_the_recall():
    fact = Recollection("fact", "fact:home", "user lives in Lisbon", (), -1, 0.4)
    ids = [f"t{n}" for n in range(1, 9)]
    # t5 alone reaches the gate, ranked fifth of eight; the rest are above the floor.
    items = (fact,) + with_relevance([item(i) for i in ids], {
        "t1": 0.2, "t2": 0.15, "t3": 0.12, "t4": 0.11, "t5": 0.31, "t6": 0.2, "t7": 0.18,
        "t8": 0.05}, [])
    kept = above_floor(items, 0.1, gate=0.3, per_relevant=3)
    # One item reaches the gate: the three best-ranked above the floor, and the fact (unknown
    # relevance), in order.
    assert [r.id for r in kept] == ["fact:home", "t1", "t2", "t3"]
    # Two reach it: six.
    two = with_relevance([item(i) for i in ids], {i: 0.31 if i in ("t1", "t2") else 0.2
                                                  for i in ids}, [])
    assert [r.id for r in above_floor(two, 0.1, gate=0.3, per_relevant=3)] == ids[:6]
    # No cap (0), no gate, or a message about the past (no gate): every item above the floor.
    above = ["fact:home"] + [i for i in ids if i != "t8"]
    assert [r.id for r in above_floor(items, 0.1, gate=0.3)] == above
    assert [r.id for r in above_floor(items, 0.1, gate=None, per_relevant=3)] == above
    assert [r.id for r in above_floor(items, 0.1, gate=0.3, need=Need.PAST,
                                      per_relevant=3)] == above


def test_the_thresholds_are_strict_config_naming_the_key():
    from pydantic import ValidationError

    assert TenantMemoryConfig().recall_relevance_floor is None  # the embedder's own
    assert TenantMemoryConfig(recall_relevance_gate=-1).recall_relevance_gate == -1
    assert TenantMemoryConfig().recall_items_per_relevant == 3
    with pytest.raises(ValidationError, match="recall_items_per_relevant"):
        TenantMemoryConfig(recall_items_per_relevant=-1)
    for key in ("recall_relevance_floor", "recall_relevance_gate"):
        with pytest.raises(ValidationError, match=key):
            TenantMemoryConfig(**{key: 1.5})
        with pytest.raises(ValidationError, match=key):
            TenantMemoryConfig(**{key: "high"})


def test_what_the_message_asks_comes_before_floor_and_gate():
    items = with_relevance([item("t1"), item("t2")], {"t1": 0.2, "t2": 0.05}, [])
    assert above_floor(items, 0.1, gate=0.25) == ()  # no item reaches the gate
    assert [r.id for r in above_floor(items, 0.1, gate=0.25, need=Need.PAST)] == ["t1"]
    assert above_floor(items, None, need=Need.NONE) == ()
    assert above_floor(items, None, need=Need.OPEN) == items


def test_no_search_is_made_for_a_message_that_needs_no_memory():
    recall = RecallSettings.from_config(TenantMemoryConfig(), ContextConfig(), HashEmbedder())
    no_recall = RecallSettings.from_config(TenantMemoryConfig(recall_top_k=0), ContextConfig(),
                                           HashEmbedder())
    assert search_need("Thanks so much!", recall) is None
    assert search_need("   ", recall) is None
    assert search_need("Where is my boat?", no_recall) is None
    assert search_need("Where is my boat?", recall) is Need.OPEN
    assert search_need("Do you remember my boat?", recall) is Need.PAST
