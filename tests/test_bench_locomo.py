"""The LoCoMo benchmark harness: scoring functions, data quirks, and an end-to-end replay of
small fixtures (English and Chinese) through the real gateway and a real store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.__main__ import main as bench_main
from bench.locomo.data import canonical_id, load, parse_evidence
from bench.locomo.meter import PromptMeter
from bench.locomo.score import Scorer
from bench.locomo.script import build_script
from bench.locomo.strategies import last_n, truncate
from bench.locomo.text import answer_parts, contains, content_tokens, normalise
from gateway.core.messages import Message
from gateway.core.tokens import count_messages
from gateway.tokenizer import tokenizer_for_encoding

FIXTURES = Path(__file__).parent / "fixtures"
ZH, EN = FIXTURES / "conversations_zh.json", FIXTURES / "conversations_tiny_en.json"
RESULT_KEYS = {"strategy", "mode", "budget", "category", "n", "evidence_recall",
               "answer_containment", "date_recall", "forwarded_tokens_mean", "prefix_reuse"}


@pytest.mark.parametrize("raw, expected", [
    ("The Cat, a dog!", "cat dog"),
    ("  An   apple—and THE pear.", "apple and pear"),
    ("Ｆｕｌｌ-width ２０２２", "full width 2022"),
    ("你好，世界！", "你好世界"),
    ("我在「杭州」。", "我在杭州"),
])
def test_normalise_folds_case_width_punctuation_and_articles(raw, expected):
    assert normalise(raw) == expected
    assert normalise(normalise(raw)) == normalise(raw)


@pytest.mark.parametrize("answer, parts", [
    ("pottery, camping and painting", ["pottery", "camping", "painting"]),
    ("The beach", ["beach"]),
    ("陶艺、烘焙", ["陶艺", "烘焙"]),
    ("北京，上海；广州", ["北京", "上海", "广州"]),
    (2022, ["2022"]),
])
def test_answer_parts_split_on_english_and_chinese_separators(answer, parts):
    assert answer_parts(answer) == parts


def test_contains_respects_latin_word_boundaries_but_not_cjk():
    assert contains(normalise("my category list"), "cat") is False
    assert contains(normalise("a cat sat"), "cat") is True
    assert contains(normalise("我买了iphone手机"), "iphone") is True
    assert contains(normalise("我搬到了杭州市"), "杭州") is True


def test_content_tokens_are_words_without_stopwords_or_cjk_bigrams():
    assert content_tokens("I went to the pottery class with my sister") == {
        "went", "pottery", "class", "sister"}
    assert content_tokens("我养了橘猫") == {"我养", "养了", "了橘", "橘猫"}
    assert "的了" not in content_tokens("好的了")
    assert content_tokens("猫") == {"猫"}
    assert {"ipad", "平板"} <= content_tokens("ipad平板")


def test_evidence_ids_are_split_canonicalised_and_unresolved_ones_counted():
    known = {"D1:3", "D2:4", "D30:5"}
    assert canonical_id("D30:05") == "D30:5"
    assert parse_evidence(["D30:05"], known) == (("D30:5",), 0)
    assert parse_evidence(["D1:3; D2:4"], known) == (("D1:3", "D2:4"), 0)
    assert parse_evidence(["D1:3,D1:3", "D9:1", "D"], known) == (("D1:3",), 2)


def test_loading_keeps_int_answers_as_text_and_sessions_that_exist():
    (en,) = load(EN)
    assert [s.number for s in en.sessions] == [1, 2]
    assert en.questions[2].answer == "2024"
    assert en.questions[3].answer is None and en.questions[3].category == 5
    (zh,) = load(ZH)
    assert [s.number for s in zh.sessions] == [1, 2]  # session_3 has a date, no turns
    assert zh.questions[1].evidence == ("D1:3",)
    assert zh.questions[4].evidence == ("D2:1",) and zh.questions[4].unresolved == 1


def test_script_alternates_roles_merges_speakers_and_marks_dates_once():
    (zh,) = load(ZH)
    script = build_script(zh)
    roles = [m["role"] for m in script.messages]
    assert all(a != b for a, b in zip(roles, roles[1:]))
    first = script.messages[0]["content"]
    assert first.startswith("[2024年3月2日 上午10:00] 小林: ")
    assert "小林: 你看它多可爱。 [shares a photo: 一只橘猫趴在窗台上晒太阳]" in \
        script.messages[2]["content"]
    # Session 2 opens with speaker_b: it continues the previous assistant message.
    assert "\n[2024年4月15日 晚上8:30] 阿梅: " in script.messages[3]["content"]
    assert sum(m["content"].count("[2024年4月15日") for m in script.messages) == 1
    assert [script.reply(i) for i in script.requests][-1] == ""  # ends with speaker_a


def test_evidence_recall_gives_credit_to_verbatim_and_mostly_kept_turns():
    (en,) = load(EN)
    history = list(build_script(en).messages)
    scorer = Scorer(en, history)
    q = en.questions[0]  # evidence D1:1 "Morning Ben! I finally adopted a greyhound named Pixel."
    question = {"role": "user", "content": q.question}
    verbatim = scorer.score(q, [*history, question])
    assert (verbatim.evidence_recall, verbatim.evidence_recall_verbatim) == (1.0, 1.0)
    summary = {"role": "system", "content": "Ada finally adopted a greyhound, Pixel (morning)."}
    partial = scorer.score(q, [summary, question])
    assert (partial.evidence_recall, partial.evidence_recall_verbatim) == (1.0, 0.0)
    unrelated = scorer.score(q, [{"role": "system", "content": "Ada likes greyhounds."},
                                 question])
    assert unrelated.evidence_recall == 0.0
    # The question itself never counts as context.
    assert scorer.score(q, [{"role": "user", "content": "Pixel"}]).answer_containment == 0.0


def test_answer_containment_scores_share_of_findable_parts_and_int_answers():
    (en,) = load(EN)
    history = list(build_script(en).messages)
    scorer = Scorer(en, history)
    multi, year = en.questions[1], en.questions[2]
    assert scorer.findable[multi.index] == ["pottery class", "chess club"]
    half = [{"role": "assistant", "content": "Ada: a pottery class"},
            {"role": "user", "content": "?"}]
    assert scorer.score(multi, half).answer_containment == 0.5
    assert scorer.eligible(year)
    dated = scorer.score(year, [history[3], {"role": "user", "content": "?"}])
    assert dated.answer_containment == 1.0 and dated.date_recall == 1.0
    assert scorer.score(en.questions[3], history).answer_containment is None  # category 5


def test_chinese_scoring_without_spaces():
    (zh,) = load(ZH)
    history = list(build_script(zh).messages)
    scorer = Scorer(zh, history)
    hobbies = zh.questions[2]
    assert scorer.findable[hobbies.index] == ["陶艺", "烘焙"]
    context = [{"role": "system", "content": "阿梅在学陶艺。"}, {"role": "user", "content": "?"}]
    assert scorer.score(hobbies, context).answer_containment == 0.5
    summary = [{"role": "system", "content": "小林：好久不见阿梅，上周刚搬到杭州了"},
               {"role": "user", "content": "?"}]
    assert scorer.score(zh.questions[0], summary).evidence_recall == 1.0
    unrelated = [{"role": "system", "content": "阿梅喜欢杭州的西湖"}, {"role": "user", "content": "?"}]
    assert scorer.score(zh.questions[0], unrelated).evidence_recall == 0.0


def test_meter_counts_like_the_gateway_and_measures_prefix_reuse():
    meter = PromptMeter()
    prompt = [{"role": "user", "content": "hello there"}, {"role": "assistant", "content": "你好"}]
    expected = count_messages([Message.from_openai(m) for m in prompt],
                              tokenizer_for_encoding("cl100k_base"))
    assert meter.tokens(prompt) == expected
    assert meter.prefix_reuse(prompt, prompt) == 1.0
    assert meter.prefix_reuse([], prompt) == 0.0
    longer = [*prompt, {"role": "user", "content": "more"}]
    assert 0.5 < meter.prefix_reuse(prompt, longer) < 1.0


def test_baselines_keep_newest_messages_within_budget():
    meter = PromptMeter()
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"}
               for i in range(30)]
    current = {"role": "user", "content": "question"}
    assert last_n(history, current) == [*history[-20:], current]
    kept = truncate(history, current, 60, meter)
    assert meter.tokens(kept) <= 60 and kept[-1] is current
    assert kept[:-1] == history[len(history) - len(kept) + 1:]


@pytest.mark.parametrize("fixture", [ZH, EN])
def test_replay_through_the_real_gateway(fixture, redis_url, tmp_path):
    out = tmp_path / "r.json"
    assert bench_main(["locomo", "--data", str(fixture), "--store", redis_url,
                       "--budgets", "60,100000", "--out", str(out)]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    assert {"machine", "versions", "config", "started", "duration_s"} <= set(data["meta"])
    assert data["meta"]["counts"]["mode_mismatches_by_budget"] == {"60": 0, "100000": 0}
    assert data["meta"]["counts"]["token_header_mismatches"] == 0
    rows = {(r["strategy"], r["mode"], r["budget"], r["category"]): r for r in data["results"]}
    assert all(RESULT_KEYS <= set(r) for r in rows.values())
    assert rows[("full", None, None, "all")]["evidence_recall"] == 1.0
    assert rows[("full", None, None, "5")]["evidence_recall"] == 1.0
    for mode in ("stateless", "stateful"):
        big = rows[("gateway", mode, 100000, "all")]
        assert big["evidence_recall"] == rows[("full", None, None, "all")]["evidence_recall"]
        assert big["answer_containment"] == 1.0
        assert big["forwarded_tokens_mean"] == rows[("full", None, None, "all")][
            "forwarded_tokens_mean"]
    for category in ("all", "5"):
        stateless = {k: v for k, v in rows[("gateway", "stateless", 60, category)].items()
                     if k != "mode"}
        stateful = {k: v for k, v in rows[("gateway", "stateful", 60, category)].items()
                    if k != "mode"}
        assert stateless == stateful
    assert out.with_suffix(".md").read_text(encoding="utf-8").startswith("# LoCoMo")
    assert out.with_suffix(".png").stat().st_size > 0
