"""The LoCoMo benchmark harness: scoring functions, data quirks, and an end-to-end replay of
small fixtures (English and Chinese) through the real gateway and a real store."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import redis

from bench.__main__ import main as bench_main
from bench.locomo.data import (Turn, canonical_id, chain, load, parse_conversation,
                               parse_evidence)
from bench.locomo.meter import PromptMeter
from bench.locomo.score import Scorer
from bench.locomo.retrieval import TurnRetriever, pack, rrf, turn_lines
from bench.locomo.script import build_script, session_scripts
from bench.locomo.server import _FailOpenLog, read_fail_open
from bench.locomo.strategies import last_n, truncate
from bench.locomo.text import answer_parts, contains, content_tokens, normalise
from gateway.core.messages import Message
from gateway.memory.embedders.use import UseEmbedder
from gateway.core.text.tokens import count_messages
from gateway.tokenizer import tokenizer_for_encoding

FIXTURES = Path(__file__).parents[1] / "fixtures"
ZH, EN = FIXTURES / "conversations_zh.json", FIXTURES / "conversations_tiny_en.json"
RESULT_KEYS = {"strategy", "mode", "budget", "category", "n", "evidence_recall",
               "answer_containment", "date_recall", "forwarded_tokens_mean", "prefix_reuse",
               "cost_per_turn", "cost_vs_whole", "null_probe_recalled_tokens"}
BUDGETS = (60, 80, 400, 100000)
"""One replay per fixture, shared by the replay and rescoring tests below: 60 (tighter than
one turn's worth of history) and 100000 (the whole history fits) for the replay's checks, 80
and 400 between them for the rescoring's (which checks every budget of the run); a run's fixed cost (a gateway child process,
the baselines' embeddings) is most of its time, so four budgets in one run take about as long
as two."""


@pytest.fixture(scope="module")
def locomo_run(valkey_server_url, tmp_path_factory):
    """`run(fixture)`: (report, prompt dump) of `bench locomo` over `fixture` at BUDGETS, run
    once per fixture in this module, on the session's store flushed first."""
    runs: dict[Path, tuple[Path, Path]] = {}

    def run(fixture: Path) -> tuple[Path, Path]:
        if fixture not in runs:
            with redis.Redis.from_url(valkey_server_url) as client:
                client.flushdb()
            folder = tmp_path_factory.mktemp("locomo")
            out, dump = folder / "r.json", folder / "prompts.jsonl"
            assert bench_main(["locomo", "--data", str(fixture), "--store", valkey_server_url,
                               "--budgets", ",".join(map(str, BUDGETS)), "--out", str(out),
                               "--modes", "stateless,stateful,sessions,continued",
                               "--dump-prompts", str(dump)]) == 0
            runs[fixture] = out, dump
        return runs[fixture]

    return run


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


def _conversation(answer: object = "7 May 2023", category: int = 2):
    """One session; Ada's second turn holds the date the question asks for."""
    return parse_conversation({
        "sample_id": "synthetic",
        "conversation": {
            "speaker_a": "Ada", "speaker_b": "Ben",
            "session_1_date_time": "9:00 am on 1 June, 2023",
            "session_1": [
                {"speaker": "Ada", "dia_id": "D1:1", "text": "Hi   Ben! ｆｕｌｌ width here."},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "We moved in on 7 May 2023.",
                 "blip_caption": "a blue door"},
            ]},
        "qa": [{"question": "When did Ben move?", "answer": answer, "evidence": ["D1:2"],
                "category": category},
               {"question": "What did Ada say?", "evidence": ["D1:1"], "category": 5}]})


def test_chained_conversations_are_one_user_s_history_with_the_last_pass_s_questions():
    first = _conversation()
    second = parse_conversation({
        "sample_id": "other", "conversation": {
            "speaker_a": "Cy", "speaker_b": "Dee", "session_1_date_time": "2 June, 2023",
            "session_1": [{"speaker": "Cy", "dia_id": "D1:1", "text": "I adopted a cat."},
                          {"speaker": "Dee", "dia_id": "D1:2", "text": "Which one?"}]},
        "qa": [{"question": "What did Cy adopt?", "answer": "a cat", "evidence": ["D1:1"],
                "category": 4}]})
    once = chain([first, second])
    assert [s.number for s in once.sessions] == [1, 2]
    # Each turn keeps its speaker, as the questions name them, and its role in its own chat.
    assert once.sessions[1].turns[0] == Turn("D2:1", 2, "Cy", "I adopted a cat.", role="user")
    assert [m["role"] for m in build_script(once).messages] == ["user", "assistant", "user",
                                                                "assistant"]
    assert build_script(once).messages[2]["content"] == "[2 June, 2023] Cy: I adopted a cat."
    assert [(q.index, q.question, q.evidence) for q in once.questions] == [
        (0, "When did Ben move?", ("D1:2",)), (1, "What did Ada say?", ("D1:1",)),
        (2, "What did Cy adopt?", ("D2:1",))]
    twice = chain([first, second], times=2)
    assert len(twice.sessions) == 4 and len(twice.questions) == 3
    assert twice.questions[2].evidence == ("D4:1",)
    assert twice.turns()["D4:1"].text == twice.turns()["D2:1"].text


def _ask(content: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": content}, {"role": "user", "content": "?"}]


def test_evidence_counts_only_a_verbatim_turn_line_after_nfkc_and_whitespace_collapse():
    conversation = _conversation()
    scorer = Scorer(conversation, build_script(conversation).messages)
    moved, greeting = conversation.questions
    line = "Ben: We moved in on 7 May 2023. [shares a photo: a blue door]"
    assert scorer.score(moved, _ask(f"[date] {line}\nmore")).evidence_recall == 1.0
    assert scorer.score(moved, _ask(line.replace(" ", "\n  "))).evidence_recall == 1.0
    # Without the photo caption the rendered line is not there; lowercased neither.
    assert scorer.score(moved, _ask("Ben: We moved in on 7 May 2023.")).evidence_recall == 0.0
    assert scorer.score(moved, _ask(line.lower())).evidence_recall == 0.0
    # The lenient figure still credits a copy that keeps most content words.
    kept = scorer.score(moved, _ask("Ben moved in on 7 May 2023 (blue door)"))
    assert (kept.evidence_recall, kept.evidence_recall_lenient) == (0.0, 1.0)
    # NFKC on both sides: full-width letters match their ASCII form; category 5 counts.
    assert scorer.score(greeting, _ask("Ada: Hi Ben! full width here.")).evidence_recall == 1.0
    # The question itself never counts as context.
    assert scorer.score(moved, [{"role": "user", "content": line}]).evidence_recall == 0.0


def test_answer_containment_needs_the_whole_answer_and_eligibility_the_whole_answer():
    conversation = _conversation()
    scorer = Scorer(conversation, build_script(conversation).messages)
    moved = conversation.questions[0]
    assert scorer.eligible(moved)
    assert scorer.score(moved, _ask("It was 2023.")).answer_containment == 0.0
    assert scorer.score(moved, _ask("on 7 may, 2023!")).answer_containment == 1.0
    assert scorer.score(conversation.questions[1], _ask("x")).answer_containment is None
    # An answer whose parts occur but not as a whole is not eligible (lenient: it is).
    split = _conversation("blue door and 7 May 2023", category=1)
    split_scorer = Scorer(split, build_script(split).messages)
    assert not split_scorer.eligible(split.questions[0])
    partial = split_scorer.score(split.questions[0], _ask("a blue door"))
    assert partial.answer_containment is None and partial.answer_containment_parts == 0.5


def test_answer_containment_scores_int_answers_and_skips_category_5():
    (en,) = load(EN)
    history = list(build_script(en).messages)
    scorer = Scorer(en, history)
    multi, year = en.questions[1], en.questions[2]
    assert scorer.eligible(multi) and scorer.findable[multi.index] == ["pottery class",
                                                                        "chess club"]
    half = [{"role": "assistant", "content": "Ada: a pottery class"},
            {"role": "user", "content": "?"}]
    assert scorer.score(multi, half).answer_containment == 0.0
    assert scorer.score(multi, half).answer_containment_parts == 0.5
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
    assert scorer.score(hobbies, context).answer_containment_parts == 0.5
    line = zh.turns()[zh.questions[0].evidence[0]].line
    assert scorer.score(zh.questions[0], _ask(f"x\n{line}")).evidence_recall == 1.0
    summary = [{"role": "system", "content": "小林：好久不见阿梅，上周刚搬到杭州了"},
               {"role": "user", "content": "?"}]
    assert scorer.score(zh.questions[0], summary).evidence_recall_lenient == 1.0
    unrelated = [{"role": "system", "content": "阿梅喜欢杭州的西湖"}, {"role": "user", "content": "?"}]
    assert scorer.score(zh.questions[0], unrelated).evidence_recall_lenient == 0.0


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


def test_session_scripts_render_each_session_as_its_own_conversation():
    (zh,) = load(ZH)
    first, second = session_scripts(zh)  # session_3 has no turns
    assert first.messages[0]["content"].startswith("[2024年3月2日 上午10:00] 小林: ")
    # Session 2 opens with speaker_b: its own conversation starts with an assistant message.
    assert second.messages[0]["role"] == "assistant"
    assert second.messages[0]["content"].startswith("[2024年4月15日 晚上8:30] 阿梅: ")
    assert second.requests == (1, 3)
    whole = "\n".join(m["content"] for m in build_script(zh).messages)
    assert all(m["content"] in whole for s in (first, second) for m in s.messages)


def test_retrieval_baselines_rank_fuse_and_pack_within_budget_chronologically():
    (en,) = load(EN)
    lines = turn_lines(en)
    assert lines[0] == "[9:00 am on 3 March, 2024] Ada: Morning Ben! I finally adopted a " \
        "greyhound named Pixel."
    assert rrf([2, 0, 1], [0, 2, 1]) == [0, 2, 1]  # ties by index
    meter = PromptMeter()
    current = {"role": "user", "content": "What did Ada sign up for?"}
    ranking = [4, 0, 3, 1, 2, 5]
    whole = pack(lines, ranking, current, 100000, meter)
    assert whole[0]["content"] == "\n".join(lines) and whole[-1] is current
    for budget in (40, 60, 80, 120):
        prompt = pack(lines, ranking, current, budget, meter)
        assert meter.tokens(prompt) <= budget and prompt[-1] is current
        if len(prompt) == 2:
            shown = prompt[0]["content"].split("\n")
            assert shown == [line for line in lines if line in shown]  # chronological
            if meter.tokens(pack(lines, [4], current, 100000, meter)) <= budget:
                assert lines[4] in shown  # the best-ranked turn is taken when it fits
    # A turn too long for what is left is skipped; a shorter one after it may still fit.
    skipped = pack(lines, ranking, current, 60, meter)
    assert skipped[0]["content"] == lines[0]
    assert pack(lines, ranking, current, 5, meter) == [current]


def test_bm25_and_dense_rank_the_evidence_turn_first_in_english_and_chinese():
    embedder = UseEmbedder()
    (en,) = load(EN)
    (rankings,) = TurnRetriever(en, embedder).rank(["Which sailboat is Ben restoring?"])
    assert rankings.bm25[0] == rankings.dense[0] == rankings.hybrid[0] == 1
    (zh,) = load(ZH)
    (rankings,) = TurnRetriever(zh, embedder).rank(["花瓶是什么颜色的？"])
    assert rankings.bm25[0] == 5  # D2:1, through the character bigrams


@pytest.mark.parametrize("fixture", [ZH, EN])
def test_replay_through_the_real_gateway(fixture, locomo_run):
    out, dump = locomo_run(fixture)
    data = json.loads(out.read_text(encoding="utf-8"))
    assert {"machine", "versions", "config", "started", "duration_s"} <= set(data["meta"])
    assert data["meta"]["counts"]["mode_mismatches_by_budget"] == {str(b): 0 for b in BUDGETS}
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
    for strategy in ("bm25", "dense", "hybrid", "truncate"):
        assert rows[(strategy, None, 60, "all")]["forwarded_tokens_mean"] <= 60
        assert rows[(strategy, None, 100000, "all")]["evidence_recall"] == 1.0
    # Billing: the whole history is its own yardstick, and the newest turns that fit a budget
    # larger than the history are the whole history, billed alike; a tiny budget forwards
    # less, so it costs less before caching is counted.
    assert set(rows[("full", None, None, "all")]["cost_vs_whole"].values()) == {1.0}
    assert rows[("truncate", None, 100000, "all")]["cost_per_turn"] == \
        rows[("full", None, None, "all")]["cost_per_turn"]
    assert all(0 < v < 1 for v in rows[("truncate", None, 60, "all")]["cost_vs_whole"].values())
    # Null probes are asked of the gateway only; what recall adds fits the budget.
    for mode in ("stateless", "stateful", "sessions", "continued"):
        assert 0 <= rows[("gateway", mode, 60, "all")]["null_probe_recalled_tokens"] <= 60
        assert rows[("gateway", mode, 100000, "all")]["null_probe_recalled_tokens"] >= 0
    assert rows[("hybrid", None, 60, "all")]["null_probe_recalled_tokens"] is None
    assert rows[("gateway", "sessions", 100000, "all")]["n"] == \
        rows[("full", None, None, "all")]["n"]
    (conversation,) = load(fixture)
    questions = len(conversation.questions)
    everything = [json.loads(line) for line in dump.read_text(encoding="utf-8").splitlines()]
    lines = [line for line in everything if line["qa"] is not None]
    replayed = [line for line in everything if line["qa"] is None and "null" not in line]
    nulls = [line for line in everything if "null" in line]
    assert all(list(line) == ["conversation", "qa", "strategy", "mode", "budget", "messages"]
               for line in lines)
    # Every replayed request of the gateway too, in its conversation ("thread") and order,
    # with the stable prefix it marked.
    assert all(list(line) == ["conversation", "qa", "thread", "turn", "strategy", "mode",
                              "budget", "stable", "messages"] and line["strategy"] == "gateway"
               and (line["stable"] is None or 0 <= line["stable"] <= len(line["messages"]))
               for line in replayed)
    assert any(line["stable"] for line in replayed)
    # And every null probe of the gateway.
    assert len(nulls) == 4 * len(BUDGETS) * 5 and all(
        list(line) == ["conversation", "qa", "null", "strategy", "mode", "budget", "messages"]
        for line in nulls)
    (conversation,) = load(fixture)
    replays = len(build_script(conversation).requests)
    per_budget = 2 * replays + 2 * sum(len(s.requests) for s in session_scripts(conversation))
    assert len(replayed) == len(BUDGETS) * per_budget
    stateless = [d for d in replayed if d["mode"] == "stateless" and d["budget"] == BUDGETS[0]]
    assert len({d["thread"] for d in stateless}) == 1
    assert sorted(d["turn"] for d in stateless) == list(build_script(conversation).requests)
    probes = {(d["strategy"], d["mode"], d["budget"], d["qa"]) for d in lines}
    expected = {("gateway", m, b) for m in ("stateless", "stateful", "sessions", "continued")
                for b in BUDGETS}
    expected |= {(s, None, b) for s in ("truncate", "bm25", "dense", "hybrid")
                 for b in BUDGETS} | {("full", None, None), ("last-n", None, None)}
    assert probes == {(*k, i) for k in expected for i in range(questions)}
    assert len(lines) == len(probes)
    assert {d["conversation"] for d in lines} == {conversation.sample_id}
    sessions = [d for d in lines if d["mode"] == "sessions" and d["budget"] == 100000]
    assert all(d["messages"][-1] == {"role": "user", "content": conversation.questions[
        d["qa"]].question} for d in sessions)
    # `continued` asks each question as the last session's next message: that session's
    # history (it fits the big budget) comes before it, which a fresh conversation lacks.
    last = session_scripts(conversation)[-1].messages
    continued = [d for d in lines if d["mode"] == "continued" and d["budget"] == 100000]
    assert continued and all(
        [m["content"] for m in d["messages"] if m["content"] in {x["content"] for x in last}]
        == [m["content"] for m in last] for d in continued)
    assert not any(m["content"] == last[0]["content"] for d in sessions for m in d["messages"])
    report = out.with_suffix(".md").read_text(encoding="utf-8")
    assert report.startswith("# LoCoMo") and "Wall time" in report
    assert "| hybrid |" in report and "| gateway | sessions |" in report
    assert out.with_suffix(".png").stat().st_size > 0


def test_set_overrides_reach_every_bench_tenant_or_the_whole_config():
    from bench.locomo.cli import parse_args
    from bench.locomo.replay import gateway_config
    from gateway.config import parse_config

    args = parse_args(["--out", "x.json", "--set", "context.summary_share=0.1",
                       "--set", "context.recall_share=0.85",
                       "--set", "memory.facts_k=0",
                       "--set", "config.memory.index.stemming=false"])
    config = parse_config(gateway_config("redis://127.0.0.1:1/0", [1000, 2000], args.overrides))
    assert not config.memory.index.stemming and config.memory.index.context_vectors
    for t in config.tenants.values():
        assert (t.context.summary_share, t.memory.facts_k) == (0.1, 0)
    with pytest.raises(SystemExit):
        parse_args(["--out", "x.json", "--set", "no-equals-sign"])


def test_held_out_folds_give_each_conversation_tenants_with_its_own_weights():
    from bench.locomo.replay import api_key, gateway_config, tenant
    from gateway.config import hash_key, parse_config
    from gateway.core.recall.ranker_weights import DEV_WEIGHTS
    from gateway.core.recall.ranking import Ranker

    folds = {"c1": {**DEV_WEIGHTS, "place": 9.0}, "c2": {**DEV_WEIGHTS, "place": -9.0}}
    config = parse_config(gateway_config("redis://127.0.0.1:1/0", [1000, 2000], folds=folds))
    assert set(config.tenants) == {tenant(b, f) for b in (1000, 2000) for f in folds}
    for budget in (1000, 2000):
        for fold, weights in folds.items():
            t = config.tenants[tenant(budget, fold)]
            assert t.memory.ranker() == Ranker.of(weights)
            assert t.api_keys[0].sha256 == hash_key(api_key(budget, fold))
    assert len({api_key(1000, f) for f in folds} | {api_key(1000)}) == 3


def test_a_held_out_run_trains_each_conversations_weights_without_it(redis_url, tmp_path):
    out = tmp_path / "r.json"
    data = FIXTURES / "zh-conversations.json"  # three conversations
    assert bench_main(["locomo", "--data", str(data), "--store", redis_url,
                       "--budgets", "300", "--modes", "stateful", "--out", str(out)]) == 0
    meta = json.loads(out.read_text(encoding="utf-8"))["meta"]["config"]
    ids = [c.sample_id for c in load(data)]
    assert meta["ranker"] == "held-out" and sorted(meta["ranker_folds"]) == sorted(ids)
    folds = [tuple(meta["ranker_folds"][i].values()) for i in ids]
    assert len(set(folds)) == 3  # each trained on a different pair of conversations
    from bench.locomo.ranker import fold_weights
    assert fold_weights(data) == meta["ranker_folds"]  # deterministic


def test_fail_open_requests_are_logged_by_request_id(tmp_path):
    path = str(tmp_path / "fail-open.log")
    handler = _FailOpenLog(path)
    for line in ({"request_id": "a", "memory_error": "TimeoutError()"}, {"request_id": "b"},
                 {"request_id": "c", "passthrough": "store_unavailable"},
                 {"request_id": "d", "passthrough": "no_conversation_id"}):
        handler.emit(logging.LogRecord("gateway.request", logging.INFO, __file__, 1,
                                       json.dumps(line), None, None))
    handler.emit(logging.LogRecord("gateway.request", logging.INFO, __file__, 1, "not json",
                                   None, None))
    assert read_fail_open(path) == {"a", "c"}
    assert read_fail_open(str(tmp_path / "missing.log")) == set()


def test_ablation_table_reads_each_steps_gateway_and_hybrid_rows_for_every_shape(tmp_path):
    from bench.locomo import ablation

    def row(strategy, mode, budget, category, er, ac=None):
        return {"strategy": strategy, "mode": mode, "budget": budget, "category": category,
                "evidence_recall": er, "answer_containment": ac, "forwarded_tokens_mean": 1990}
    meta = {"config": {"overrides": {"memory.facts_k": 0}}, "counts": {
        "fail_open_probes_scored": 0}, "machine": {"cores": 2}, "started": "t",
        "duration_s": 1.0}
    for i, (name, _, _) in enumerate(ablation.STEPS):
        locomo = [row("gateway", "stateful", 2000, "all", 0.5 + i / 100, 0.8),
                  row("gateway", "stateful", 2000, "1", 0.4),
                  row("gateway", "stateless", 2000, "all", 0.1, 0.1),
                  row("hybrid", None, 2000, "all", 0.75, 0.83)]
        chats = [row("gateway", "stateful", b, "all", b / 1000 - i / 100, 0.9)
                 for b in (500, 1000)] + [row("hybrid", None, b, "all", 0.6, 0.7)
                                          for b in (500, 1000)]
        for key, rows in (("locomo-dev", locomo), ("memorybank-zh-dev", chats)):
            (tmp_path / f"ablation-{key}-{name}.json").write_text(
                json.dumps({"meta": meta, "results": rows}))
    out = tmp_path / "ablation.json"
    assert ablation.main(["--data", str(tmp_path / "locomo-dev.json@2000"),
                          "--data", str(tmp_path / "memorybank-zh-dev.json@500,1000"),
                          "--reuse", str(tmp_path), "--out", str(out)]) == 0
    steps = json.loads(out.read_text())["steps"]
    locomo = [s for s in steps if s["data"] == "LoCoMo dev"]
    assert [s["gateway"]["evidence_recall"] for s in locomo] == [
        0.5 + i / 100 for i in range(len(ablation.STEPS))]
    assert locomo[0]["hybrid"]["evidence_recall"] == 0.75
    assert locomo[0]["run_overrides"] == {"memory.facts_k": 0}
    zh = [(s["step"], s["budget"], s["gateway"]["evidence_recall"]) for s in steps
          if s["data"] == "MemoryBank-zh"][:2]
    assert zh == [("a0_hybrid", 500, 0.5), ("a0_hybrid", 1000, 1.0)]
    text = out.with_suffix(".md").read_text()
    # The steps side by side: LoCoMo at 2,000, then MemoryBank-zh at 500 and 1,000.
    assert "| step | LoCoMo dev 2,000 | MemoryBank-zh 500 | MemoryBank-zh 1,000 |" in text
    assert "| 0.500 / 0.800 | 0.500 / 0.900 | 1.000 / 0.900 |" in text
    assert "| 0.500 | 0.400 |" in text  # LoCoMo's per-category table
    assert "not run" not in text  # every step ran
    # Steps left out are named: a row then adds every step since the row above.
    assert "a1_stem, a2_ctx" in ablation._skipped(["a0_hybrid", "a3_succ"])
    assert ablation._skipped(["a0_hybrid", "a1_stem"]) == ""


@pytest.mark.parametrize("fixture", [ZH, EN])
def test_an_independent_rescoring_of_the_prompt_dump_gives_the_reported_figures(
        fixture, locomo_run):
    from bench.locomo.rescore import rescore

    out, dump = locomo_run(fixture)
    reported = {(r["strategy"], r["mode"], r["budget"]): r
                for r in json.loads(out.read_text(encoding="utf-8"))["results"]
                if r["category"] == "all"}
    with open(fixture, encoding="utf-8") as data, open(dump, encoding="utf-8") as lines:
        again = rescore(json.load(data), lines)
    assert set(again) == set(reported)
    for key, figures in again.items():
        for metric in ("evidence_recall", "answer_containment"):
            if figures[metric] is None:
                assert reported[key][metric] is None, (key, metric)
            else:
                assert figures[metric] == pytest.approx(reported[key][metric], abs=6e-5), \
                    (key, metric)
        if key[0] == "gateway":  # the replayed requests' prefix reuse, from the dump alone
            assert figures["n_pairs"] > 0
            assert figures["prefix_reuse"] == pytest.approx(reported[key]["prefix_reuse"],
                                                            abs=6e-5), key  # 4 decimals


def test_every_door_forwards_the_same_prompts_and_scores_the_same(redis_url, tmp_path,
                                                                   monkeypatch):
    """`--dialect`: the same conversations through the Messages and Responses doors make the
    model see exactly what the chat door makes it see (the wire form is all that changes)."""
    from bench.locomo import replay

    paths_used: list[str] = []

    class Paths(dict):  # the harness's own table, noting which door each request took
        def __getitem__(self, dialect):
            paths_used.append(dialect)
            return super().__getitem__(dialect)

    monkeypatch.setattr(replay, "PATHS", Paths(replay.PATHS))

    def gateway_run(dialect: str) -> tuple[dict, dict]:
        paths_used.clear()
        out, dump = tmp_path / f"{dialect}.json", tmp_path / f"{dialect}.jsonl"
        assert bench_main(["locomo", "--data", str(EN), "--store", redis_url, "--budgets",
                           "60", "--modes", "stateless,stateful", "--dialect", dialect,
                           "--out", str(out), "--dump-prompts", str(dump)]) == 0
        data = json.loads(out.read_text(encoding="utf-8"))
        assert data["meta"]["config"]["dialect"] == dialect
        assert paths_used and set(paths_used) == {dialect}
        rows = {(r["mode"], r["category"]): r for r in data["results"]
                if r["strategy"] == "gateway"}
        # a probe by its question, a replayed request by its turn, a null probe by its index
        prompts = {(d["mode"], d["qa"], d.get("turn"), d.get("null")): d["messages"]
                   for d in map(json.loads, dump.read_text(encoding="utf-8").splitlines())
                   if d["strategy"] == "gateway"}
        return rows, prompts

    chat_rows, chat_prompts = gateway_run("chat")
    assert chat_prompts
    for dialect in ("anthropic", "responses"):
        rows, prompts = gateway_run(dialect)
        assert prompts == chat_prompts, dialect
        assert {k: r["evidence_recall"] for k, r in rows.items()} == \
            {k: r["evidence_recall"] for k, r in chat_rows.items()}


def test_a_rerun_with_a_vector_cache_scores_the_same_and_embeds_only_what_is_new(
        redis_url, tmp_path, capfd):
    cache = tmp_path / "vectors"
    figures = []
    for run in ("first", "second"):
        with redis.Redis.from_url(redis_url) as client:
            client.flushdb()
        out = tmp_path / f"{run}.json"
        assert bench_main(["locomo", "--data", str(EN), "--store", redis_url, "--budgets", "400",
                           "--modes", "stateful", "--gateway-processes", "1",
                           "--vector-cache", str(cache), "--out", str(out)]) == 0
        figures.append([(r["strategy"], r["budget"], r["evidence_recall"])
                        for r in json.loads(out.read_text())["results"]])
    assert figures[0] == figures[1]  # the cache's vectors are the embedder's own
    # the children's counts (stderr): the first run embeds the turns, the second finds them
    counts = [line for line in capfd.readouterr().err.splitlines() if "vector cache" in line]
    hits, embedded = zip(*((int(w[-4]), int(w[-2])) for w in map(str.split, counts)))
    assert len(counts) == 2 and embedded[0] > embedded[1] and hits[1] > hits[0]
    assert any(cache.glob("use-multilingual-v3*.npz"))
