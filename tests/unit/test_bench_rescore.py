"""The independent rescoring's prefix reuse (bench/locomo/rescore.py) against the harness's meter
(bench/locomo/meter.py): two implementations of one rule, and the grouping of a dump's replayed
requests by conversation, in request order."""

from __future__ import annotations

import json

import pytest

from bench.locomo.meter import PromptMeter
from bench.locomo.rescore import cost_lines, first_sessions, prefix_reuse, rescore

STORY = [{"role": "user" if i % 2 == 0 else "assistant",
          "content": f"Turn {i}: the keeper of the harbour light told a story " * 3}
         for i in range(12)]


@pytest.mark.parametrize("before, after", [
    (STORY[:8], STORY[:10]),  # append-only
    (STORY[:8], [{"role": "system", "content": "Recalled: x"}, *STORY[:10]]),  # new head
    (STORY[:8], [*STORY[:5], {"role": "user", "content": STORY[5]["content"] + " edited"}]),
    (STORY[2:8], STORY[4:10]),  # a sliding window
])
def test_prefix_reuse_agrees_with_the_harness_meter(before, after):
    assert prefix_reuse(before, after) == pytest.approx(PromptMeter().prefix_reuse(before, after))


def test_replayed_requests_are_paired_in_order_within_their_conversation():
    def line(thread: str, turn: int, messages, budget: int = 100) -> str:
        return json.dumps({"conversation": "c1", "qa": None, "thread": thread, "turn": turn,
                           "strategy": "gateway", "mode": "stateless", "budget": budget,
                           "messages": messages})
    dump = [line("a", 2, STORY[:6]), line("a", 0, STORY[:2]), line("a", 1, STORY[:4]),
            line("b", 0, STORY[6:8]), line("a", 3, STORY[6:8], budget=200)]
    scores = rescore([], dump)
    expected = (prefix_reuse(STORY[:2], STORY[:4]) + prefix_reuse(STORY[:4], STORY[:6])) / 2
    assert scores[("gateway", "stateless", 100)]["prefix_reuse"] == pytest.approx(expected)
    assert scores[("gateway", "stateless", 100)]["n_pairs"] == 2  # thread b is alone
    assert ("gateway", "stateless", 200) not in scores  # one request: no pair


def test_the_rescoring_chains_a_file_as_the_harness_does():
    """`locomo-rescore --chain K` builds the long history from the raw file itself; its evidence
    lines are the turns the harness's `data.chain` replays."""
    from bench.locomo.data import chain, parse_conversation
    from bench.locomo.rescore import Sample, chained

    def item(sid, a, b, turns, qa):
        sessions = {f"session_{n}": [{"speaker": a if k % 2 else b, "dia_id": f"D{n}:{k}",
                                      "text": f"{sid} s{n} t{k}"} for k in range(1, 3)]
                    for n in turns}
        dates = {f"session_{n}_date_time": f"day {n}" for n in turns}
        return {"sample_id": sid, "conversation": {"speaker_a": a, "speaker_b": b,
                                                   **sessions, **dates}, "qa": qa}
    data = [item("x", "Ada", "Ben", [1, 2], [{"question": "q1", "answer": "a", "category": 4,
                                               "evidence": ["D2:1; D1:02"]}]),
            item("y", "Cy", "Dee", [1, 3], [{"question": "q2", "answer": "b", "category": 4,
                                              "evidence": ["D3:2", "D9:1"]}])]
    for times in (1, 2):
        harness = chain([parse_conversation(i) for i in data], times)
        ours = chained(data, times)
        assert ours["sample_id"] == harness.sample_id
        sample, turns = Sample(ours), harness.turns()
        assert [sample.evidence(q) for q in ours["qa"]] == [list(q.evidence)
                                                            for q in harness.questions]
        for q in harness.questions:
            for e in q.evidence:
                assert sample.lines[e] == f"{turns[e].speaker}: {turns[e].text}"


def test_a_cost_benchmark_dump_is_read_for_one_data_set():
    def line(data: str, probe, turn=None, thread=None) -> str:
        return json.dumps({"data": data, "conversation": "c", "thread": thread, "turn": turn,
                           "assembly": "gateway", "budget": "default", "probe": probe,
                           "stable": None, "messages": STORY[:turn or 2]})

    dump = [line("locomo-dev", None, 2, "c.stateless.replay.x"), line("locomo-dev", None, 4),
            line("locomo-dev", None, 6), line("locomo-dev", "null"),
            line("memorybank-en", None, 2)]
    out = [json.loads(x) for x in cost_lines(dump, "locomo-dev")]
    assert [(o["strategy"], o["mode"], o["budget"], o["qa"]) for o in out] == \
        [("gateway", "locomo-dev", "default", None)] * 4
    # a client-side line has no thread: its conversation is its thread
    assert [o.get("thread") for o in out] == ["c.stateless.replay.x", "c", "c", None]
    assert [o.get("turn") for o in out] == [2, 4, 6, None] and "null" in out[3]
    scores = rescore([], (json.dumps(o) for o in out))
    assert scores[("gateway", "locomo-dev", "default")]["n_pairs"] == 1
    assert scores[("gateway", "locomo-dev", "default")]["prefix_reuse"] == \
        pytest.approx(prefix_reuse(STORY[:4], STORY[:6]))


def test_first_sessions_keeps_the_first_sessions_with_turns_and_their_dates():
    item = {"sample_id": "c", "qa": [], "conversation": {
        "speaker_a": "A", "speaker_b": "B",
        "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "one"}],
        "session_1_date_time": "day 1", "session_2": [], "session_2_date_time": "day 2",
        "session_3": [{"speaker": "B", "dia_id": "D3:1", "text": "three"}],
        "session_3_date_time": "day 3",
        "session_10": [{"speaker": "A", "dia_id": "D10:1", "text": "ten"}],
        "session_10_date_time": "day 10"}}
    cut = first_sessions(item, 2)["conversation"]
    assert sorted(k for k in cut if k.startswith("session_")) == [
        "session_1", "session_1_date_time", "session_2", "session_2_date_time", "session_3",
        "session_3_date_time"]
    assert item["conversation"]["session_10"]  # the input is not changed
