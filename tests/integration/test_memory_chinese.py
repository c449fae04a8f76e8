"""The gateway's memory on Chinese conversations: tests/fixtures/zh-conversations.json holds
original Chinese conversations in the LoCoMo schema (no benchmark data copied), replayed here
through the real gateway by the LoCoMo harness (bench/locomo) and scored against the plain
retrieval baselines of the same run.

Measured (stateful mode, budget 300 tokens, conversation zh-liuyang-zhaomin, ~2,200 tokens in
all): gateway strict evidence recall 0.658, hybrid 0.474, bm25 0.474, dense 0.421.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from bench.__main__ import main as bench_main
from bench.locomo.data import load
from bench.locomo.script import build_script
from bench.locomo.score import Scorer

FIXTURE = Path(__file__).parents[1] / "fixtures" / "zh-conversations.json"
CONVERSATION = "zh-liuyang-zhaomin"
BUDGET = 300
MEASURED_RECALL = 0.658
MARGIN = 0.15
_HAN = re.compile(r"[\u4e00-\u9fff]")
_ZH_DATE = re.compile(r"^\d{4}年\d{1,2}月\d{1,2}日 (?:上午|下午|晚上)\d{1,2}:\d{2}$")


def test_chinese_fixture_is_well_formed_locomo():
    conversations = load(FIXTURE)
    assert len(conversations) == 3
    for conversation in conversations:
        assert _HAN.search(conversation.speaker_a) and _HAN.search(conversation.speaker_b)
        assert 6 <= len(conversation.sessions) <= 8
        for session in conversation.sessions:
            assert _ZH_DATE.match(session.date), session.date
            assert 8 <= len(session.turns) <= 14
            assert {t.speaker for t in session.turns} == {conversation.speaker_a,
                                                          conversation.speaker_b}
        assert 15 <= len(conversation.questions) <= 20
        assert {q.category for q in conversation.questions} == {1, 2, 3, 4, 5}
        scorer = Scorer(conversation, build_script(conversation).messages)
        for q in conversation.questions:
            assert q.evidence and q.unresolved == 0, q.question
            if q.category == 1:
                assert len({conversation.turns()[e].session for e in q.evidence}) >= 2
            if q.category != 5:
                assert scorer.eligible(q), q.question  # the answer occurs in the history


def test_gateway_recall_on_chinese_matches_hybrid_and_stays_above_floor(redis_url, tmp_path):
    out = tmp_path / "r.json"
    assert bench_main(["locomo", "--data", str(FIXTURE), "--conversations", CONVERSATION,
                       "--store", redis_url, "--budgets", str(BUDGET), "--modes", "stateful",
                       "--concurrency", "4", "--out", str(out)]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    rows = {(r["strategy"], r["mode"], r["budget"], r["category"]): r for r in data["results"]}
    full = rows[("full", None, None, "all")]
    assert full["evidence_recall"] == 1.0
    assert full["forwarded_tokens_mean"] > 3 * BUDGET  # the whole conversation does not fit
    gateway = rows[("gateway", "stateful", BUDGET, "all")]
    hybrid = rows[("hybrid", None, BUDGET, "all")]
    assert gateway["forwarded_tokens_mean"] <= BUDGET
    assert gateway["evidence_recall"] >= hybrid["evidence_recall"], (gateway, hybrid)
    assert gateway["evidence_recall"] >= MEASURED_RECALL - MARGIN, gateway
