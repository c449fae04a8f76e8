"""The fact policy (gateway.core.memory.facts): upsert by key with history, dedupe, cap, decay."""

from __future__ import annotations

import pytest

from gateway.core.memory.facts import (DAY_SECONDS, MAX_HISTORY, Fact, FactPolicy, FactVersion,
                                       age_out, apply_policy, cap, decayed_weight, dedupe_key,
                                       forget_sources, normalize_key, render_fact, upsert)

T0 = 1_700_000_000.0


def fact(key: str, value: str, *, sources=("m1",), type="fact", importance=0.8,
         confidence=0.7, updated_at=T0) -> Fact:
    return Fact(key=key, value=value, type=type, importance=importance, confidence=confidence,
                source_ids=tuple(sources), created_at=updated_at, updated_at=updated_at)


def test_a_new_key_is_added_stamped_now():
    [added] = upsert((), fact("user_location", "北京"), now=T0 + 5)
    assert (added.value, added.created_at, added.updated_at, added.history) == \
        ("北京", T0 + 5, T0 + 5, ())


def test_a_new_value_wins_and_the_old_one_is_kept_in_history():
    facts = upsert((), fact("user_location", "北京", sources=("m1",)), now=T0)
    facts = upsert(facts, fact("user_location", "上海", sources=("m7",)), now=T0 + 100)
    [moved] = facts
    assert moved.value == "上海" and moved.source_ids == ("m7",)
    assert moved.created_at == T0 and moved.updated_at == T0 + 100
    assert moved.history == (FactVersion("北京", T0, ("m1",)),)


def test_the_same_value_refreshes_time_confidence_and_sources_without_history():
    facts = upsert((), fact("user_job", "Lawyer", confidence=0.6, sources=("m1",)), now=T0)
    [same] = upsert(facts, fact("user_job", " lawyer ", confidence=0.9, sources=("m2",)),
                    now=T0 + 50)
    assert same.value == "Lawyer" and same.history == ()
    assert (same.updated_at, same.confidence, same.source_ids) == (T0 + 50, 0.9, ("m1", "m2"))


def test_replaying_an_update_from_the_same_messages_changes_nothing():
    facts = ()
    batch = [fact("user_location", "北京", sources=("m1",)),
             fact("user_location", "上海", sources=("m2",))]
    for new in batch:
        facts = upsert(facts, new, now=T0)
    replayed = facts
    for new in batch:
        replayed = upsert(replayed, new, now=T0 + 999)
    assert replayed == facts
    assert [h.value for h in facts[0].history] == ["北京"]


def test_history_is_bounded():
    facts = ()
    for i in range(MAX_HISTORY + 5):
        facts = upsert(facts, fact("k", f"v{i}", sources=(f"m{i}",)), now=T0 + i)
    assert len(facts[0].history) == MAX_HISTORY
    assert facts[0].history[-1].value == f"v{MAX_HISTORY + 3}"


def test_upsert_does_not_mutate_its_input():
    facts = (fact("a", "1"),)
    snapshot = facts
    upsert(facts, fact("a", "2", sources=("m9",)), now=T0)
    assert facts == snapshot and facts[0].value == "1"


def test_dedupe_renames_a_near_duplicate_to_the_existing_key():
    existing = (fact("user_location", "北京"), fact("favourite_food", "dumplings"))
    new = fact("home_city", "北京", sources=("m3",))
    sims = {"user_location": 0.93, "favourite_food": 0.1}
    assert dedupe_key(existing, new, sims, threshold=0.85).key == "user_location"
    assert dedupe_key(existing, new, {"user_location": 0.5}, threshold=0.85).key == "home_city"
    # a callable works as well as precomputed similarities
    assert dedupe_key(existing, new, lambda a, b: 0.9 if a.key == "user_location" else 0,
                      threshold=0.85).key == "user_location"


def test_dedupe_never_merges_distinct_vocabulary_keys_or_types():
    existing = (fact("contract_date", "2023-03-01"), fact("prefers_tea", "tea", type="preference"))
    assert dedupe_key(existing, fact("payment_deadline", "2023-03-01"),
                      {"contract_date": 0.99}, 0.85,
                      protected=frozenset({"contract_date", "payment_deadline"})
                      ).key == "payment_deadline"
    assert dedupe_key(existing, fact("likes_tea", "tea"), {"prefers_tea": 0.99},
                      0.85).key == "likes_tea"


def test_dedupe_never_renames_a_like_whose_key_names_its_value():
    existing = (fact("prefers_kanary7_hiking_in_the_hills", "Kanary7 hiking in the hills",
                     type="preference"),)
    alps = fact("prefers_kanary7_hiking_in_the_alps", "Kanary7 hiking in the alps",
                type="preference")
    assert dedupe_key(existing, alps, {"prefers_kanary7_hiking_in_the_hills": 0.97},
                      0.85).key == "prefers_kanary7_hiking_in_the_alps"
    tea = fact("user_drink", "tea", type="preference")  # any other key is still merged
    assert dedupe_key(existing, tea, {"prefers_kanary7_hiking_in_the_hills": 0.97},
                      0.85).key == "prefers_kanary7_hiking_in_the_hills"


def test_weight_halves_every_half_life():
    f = fact("k", "v", importance=0.8)
    assert decayed_weight(f, T0) == pytest.approx(0.8)
    assert decayed_weight(f, T0 + 30 * DAY_SECONDS) == pytest.approx(0.4)
    assert decayed_weight(f, T0 + 60 * DAY_SECONDS) == pytest.approx(0.2)
    assert decayed_weight(f, T0 + 10 * DAY_SECONDS, half_life_days=10) == pytest.approx(0.4)
    assert decayed_weight(f, T0 - DAY_SECONDS) == pytest.approx(0.8)  # clock skew: no boost


def test_age_out_drops_facts_below_the_threshold_with_an_injected_clock():
    old = fact("old", "x", importance=0.8, updated_at=T0)
    fresh = fact("fresh", "y", importance=0.8, updated_at=T0 + 120 * DAY_SECONDS)
    now = T0 + 150 * DAY_SECONDS  # old: 0.8 / 32 = 0.025; fresh: 0.8 / 2 = 0.4
    assert age_out((old, fresh), now, 30, drop_below=0.05) == (fresh,)
    assert age_out((old, fresh), now, 30, drop_below=0.02) == (old, fresh)


def test_cap_keeps_the_best_scored_facts_and_preferences_separately():
    facts = tuple(fact(f"f{i}", "v", importance=i / 10) for i in range(1, 6)) + tuple(
        fact(f"p{i}", "v", type="preference", importance=i / 10) for i in range(1, 4))
    kept = cap(facts, T0, max_facts=2, max_preferences=1)
    assert [f.key for f in kept] == ["f4", "f5", "p3"]


def test_cap_prefers_recent_facts_when_importance_is_equal():
    stale = fact("stale", "v", importance=0.9, updated_at=T0 - 90 * DAY_SECONDS)
    recent = fact("recent", "v", importance=0.5, updated_at=T0)
    assert cap((stale, recent), T0, max_facts=1) == (recent,)


def test_apply_policy_ages_out_then_caps():
    policy = FactPolicy(max_facts=1, max_preferences=1, half_life_days=30, drop_below=0.1)
    gone = fact("gone", "v", importance=0.2, updated_at=T0 - 60 * DAY_SECONDS)
    a, b = fact("a", "v", importance=0.9), fact("b", "v", importance=0.3)
    assert apply_policy((gone, a, b), T0, policy) == (a,)


def test_facts_round_trip_as_json_dicts_and_reject_bad_values():
    f = upsert(upsert((), fact("k", "v1"), T0), fact("k", "v2", sources=("m2",)), T0 + 1)[0]
    assert Fact.from_dict(f.to_dict()) == f
    with pytest.raises(ValueError):
        fact("k", "v", importance=1.5)
    with pytest.raises(ValueError):
        Fact(key="k", value="v", type="gossip")


def test_keys_are_normalised_to_snake_case_and_facts_render_with_a_date():
    assert normalize_key("  Home City! ") == "home_city"
    assert normalize_key("用户-城市") == "用户_城市"
    assert render_fact(fact("user_location", "北京")) == "user location: 北京 (as of 2023-11-14)"


def test_forget_sources_drops_what_only_deleted_messages_stated():
    old = FactVersion("Paris", 1.0, ("m1",))
    both = FactVersion("Rome", 2.0, ("m1", "m5"))
    fact = Fact("user_location", "Berlin", source_ids=("m2", "m3"), history=(old, both))
    # Untouched: no overlap, or nothing deleted.
    assert forget_sources(fact, frozenset({"x"})) is fact
    assert forget_sources(fact, frozenset()) is fact
    # The current value rests on m2 and m3: both gone, the fact goes (history or not).
    assert forget_sources(fact, frozenset({"m2", "m3"})) is None
    # One of its sources gone: the value stays on the other; a past value only m1 stated
    # leaves the history, one also stated elsewhere stays without m1.
    kept = forget_sources(fact, frozenset({"m1", "m2"}))
    assert kept is not None and (kept.value, kept.source_ids) == ("Berlin", ("m3",))
    assert kept.history == (FactVersion("Rome", 2.0, ("m5",)),)
    # A value with no recorded source is not known to come from the deleted messages.
    unsourced = Fact("user_name", "Ada")
    assert forget_sources(unsourced, frozenset({"m1"})) is unsourced
