"""The cost benchmark's own parts (bench/cost/): the stepped-truncation client, the data sets'
cut, prices from litellm's map, and rows computed by hand from a few billed requests."""

from __future__ import annotations

from decimal import Decimal
import json

import pytest

from bench.cost.client import STEP, SteppedTruncation
from bench.cost.data import build, first_sessions
from bench.cost.pricing import PricedModel, priced_models
from bench.cost.rows import rows
from bench.cost.runs import Cell, Measured, cells, context
from bench.cost.tally import Tally
from bench.locomo.billing import Billed
from bench.locomo.data import Conversation, Question, Session, Turn
from bench.locomo.meter import PromptMeter
from gateway.core.spend import Price

METER = PromptMeter()


def _history(n: int) -> list[dict[str, str]]:
    return [{"role": "user" if i % 2 == 0 else "assistant",
             "content": f"message {i} " + "word " * (20 + i % 7)} for i in range(n)]


def test_stepped_truncation_fits_the_budget_and_keeps_its_start_between_cuts():
    history, budget = _history(120), 600
    state = SteppedTruncation(budget, METER)
    starts, cuts = [], 0
    for i in range(0, len(history), 2):
        prompt = state.prompt(history[:i], history[i])
        assert METER.tokens(prompt) <= budget
        assert prompt[-1] is history[i]
        if starts and state.start != starts[-1]:
            cuts += 1
            # a cut leaves at most STEP of the budget (plus the new message), at a user turn
            assert METER.tokens(prompt[:-1]) <= budget * STEP
            assert history[state.start]["role"] == "user"
        starts.append(state.start)
    assert starts == sorted(starts)  # the start only moves forward
    assert 3 <= cuts < len(starts) // 2  # in steps, not every request


def test_a_probe_does_not_move_the_truncation_start():
    history, state = _history(60), SteppedTruncation(500, METER)
    state.prompt(history[:10], history[10])
    start = state.start
    state.prompt(history, {"role": "user", "content": "a question"}, keep=False)
    assert state.start == start


def test_first_sessions_keeps_the_questions_whose_evidence_lies_in_them_renumbered():
    sessions = tuple(Session(n, f"day {n}", (Turn(f"D{n}:1", n, "A", f"turn {n}"),))
                     for n in range(1, 9))
    questions = (Question(0, "q0", "a", 1, ("D7:1",), 0),
                 Question(1, "q1", "a", 1, ("D2:1", "D6:1"), 0),
                 Question(2, "q2", "a", 1, ("D2:1", "D7:1"), 0),
                 Question(3, "q3", "a", 1, (), 0))
    cut = first_sessions(Conversation("c", "A", "B", sessions, questions), 6)
    assert [s.number for s in cut.sessions] == [1, 2, 3, 4, 5, 6]
    assert [(q.index, q.question) for q in cut.questions] == [(0, "q1")]


def test_the_grid_names_the_shipped_window_default_and_before_restores_the_old_layout():
    grid = cells(("whole", "truncate", "before", "gateway"), (16000, 32000))
    assert Cell("gateway", "default") in grid and Cell("gateway", 32000) not in grid
    assert Cell("whole", None) in grid and Cell("before", 32000) in grid
    assert context(Cell("gateway", "default")) == {}
    assert context(Cell("gateway", 16000)) == {"max_context_tokens": 16000}
    assert context(Cell("before", 16000)) == {
        "max_context_tokens": 16000, "compact_to_tokens": None, "assembly": "rolling",
        "continuity_turns": 0, "outside_share": 1.0}
    # a window list without the shipped one still gets its default row
    assert Cell("gateway", "default") in cells(("whole", "gateway"), (16000,))


def test_prices_come_from_litellm_s_map_and_an_unpriced_model_costs_none():
    table = {"gpt-4.1": {"input_cost_per_token": 2e-06, "output_cost_per_token": 8e-06,
                         "cache_read_input_token_cost": 5e-07, "litellm_provider": "openai"}}
    models = {m.name: m for m in priced_models(lambda: table)}
    assert models["gpt-4.1"].rule == "openai-0.25"
    assert models["gpt-4.1"].dollars(Billed(cached=1000, written=0, plain=500)) == \
        pytest.approx(1000 * 5e-07 + 500 * 2e-06)
    assert models["gpt-5"].price is None and models["gpt-5"].dollars(Billed(1, 0, 1)) is None


def test_rows_bill_each_request_against_the_one_before_and_compare_like_with_like():
    model = PricedModel("m", "openai", Price(Decimal(1), Decimal(0), Decimal("0.25"),
                                             Decimal(1)))
    long = "word " * 1500  # > 1,024 tokens: cacheable
    first = [{"role": "user", "content": long}]
    second = [*first, {"role": "assistant", "content": "ok " * 300},
              {"role": "user", "content": "x"}]
    whole, gateway = Tally(METER), Tally(METER)
    for tally in (whole, gateway):
        tally.add("c/replay", 0, first, None, METER.tokens(first))
    whole.add("c/replay", 2, second, None, METER.tokens(second))
    gateway.add("c/replay", 2, [{"role": "user", "content": "x"}], None, METER.tokens(second))
    data = type("D", (), {"name": "d"})()
    measured = Measured(data, {Cell("whole", None): whole, Cell("gateway", 2600): gateway})
    out = {r["assembly"]: r for r in rows(measured, [model])}
    rendered = [sum(len(METER.rendered(m)) for m in p) for p in (first, second)]
    cached = 1024 + (rendered[0] - 1024) // 128 * 128
    whole_cost = (rendered[0] + cached * 0.25 + rendered[1] - cached) / 2
    assert out["whole"]["cost_per_turn"] == pytest.approx(whole_cost)
    assert out["whole"]["cost_vs_whole"] == 1.0
    assert out["whole"]["prefix_reuse"] == pytest.approx(rendered[0] / rendered[1], abs=1e-4)
    assert out["whole"]["cached_share"] == pytest.approx(cached / sum(rendered), abs=1e-4)
    small = len(METER.rendered({"role": "user", "content": "x"}))
    assert out["gateway"]["cost_per_turn"] == pytest.approx((rendered[0] + small) / 2)
    # the first request's history fits the window's 1,600 prompt tokens, the second's not
    assert METER.tokens(first) <= 1600 < METER.tokens(second)
    assert out["gateway"]["fits_share"] == 0.5
    assert out["gateway"]["cost_vs_whole_fits"] == 1.0
    assert out["gateway"]["cost_vs_whole_beyond"] == pytest.approx(
        small / (cached * 0.25 + rendered[1] - cached), abs=1e-3)
    assert out["gateway"]["recent_turns_kept"] == 0.0
    assert out["whole"]["recent_turns_kept"] == 0.5


def test_the_data_sets_build_from_a_folder_of_locomo_schema_files(tmp_path):
    """Built from the files by name (a tiny LoCoMo-schema file here: the shared bench data is
    not in a fresh checkout); a dumped probe names its question by its index in the file."""
    sessions = {f"session_{n}": [{"speaker": "A" if k % 2 == 0 else "B", "dia_id": f"D{n}:{k + 1}",
                                  "text": f"session {n} turn {k}"} for k in range(4)]
                for n in range(1, 9)}
    dates = {f"session_{n}_date_time": f"day {n}" for n in range(1, 9)}
    qa = [{"question": "late", "answer": "x", "category": 1, "evidence": ["D8:1"]},
          {"question": "early", "answer": "x", "category": 1, "evidence": ["D2:1"]},
          {"question": "both", "answer": "x", "category": 2, "evidence": ["D1:1", "D6:2"]}]
    item = {"sample_id": "c1", "conversation": {"speaker_a": "A", "speaker_b": "B", **sessions,
                                                **dates}, "qa": qa}
    (tmp_path / "locomo-dev.json").write_text(json.dumps([item]), encoding="utf-8")
    five = build("user-5-conversations", tmp_path)
    assert five.mode == "sessions" and five.billed_session == 6
    (c,) = five.conversations
    assert len(c.sessions) == 6 and [q.question for q in c.questions] == ["early", "both"]
    assert [five.file_index("c1", q.index) for q in c.questions] == [1, 2]
    continued = build("user-5-continued", tmp_path)
    assert continued.mode == "continued" and continued.billed_session == 6
    assert continued.conversations == five.conversations
    long = build("long-300k", tmp_path)
    assert long.conversations[0].sample_id.startswith("chain3-") and long.mode == "stateful"
    assert len(long.conversations[0].sessions) == 3 * 8
    assert build("locomo-dev", tmp_path).file_index("c1", 0) == 0
    with pytest.raises(ValueError, match="unknown data"):
        build("nope", tmp_path)
