"""The offline recall simulation (bench/locomo/simulate.py) on the project's Chinese fixture:
its prompts are the gateway's rewrite of what it recalls, so they fit the budget and keep the
client's question last; every question with evidence is scored."""

from __future__ import annotations

from pathlib import Path

from bench.locomo.data import load
from bench.locomo.meter import PromptMeter
from bench.locomo.simulate import Knobs, VectorCache, build_corpus, prompt, recall, simulate
from gateway.core.recall.ranking import SPEAKER_LABEL
from gateway.memory.embedders.hashing import HashEmbedder

FIXTURE = Path(__file__).parents[1] / "fixtures" / "zh-conversations.json"


def test_simulated_prompts_fit_the_budget_and_end_with_the_question(tmp_path):
    cache = VectorCache(tmp_path, HashEmbedder())
    corpora = [build_corpus(c, cache) for c in load(FIXTURE)]
    meter = PromptMeter()
    for corpus in corpora:
        for q in corpus.conversation.questions:
            messages = prompt(corpus, q.question, recall(corpus, q.question, Knobs()), 300)
            assert meter.tokens(messages) <= 300
            assert messages[-1] == {"role": "user", "content": q.question}
    result = simulate(corpora, 300, Knobs())
    with_evidence = sum(1 for c in corpora for q in c.conversation.questions if q.evidence)
    assert len(result.recall) == with_evidence
    assert 0.0 < result.mean() <= 1.0
    # Questions answered by the turn after a recalled question need successors.
    without = simulate(corpora, 300, Knobs(successors=False))
    assert without.recall != result.recall


def test_inference_knobs_change_only_questions_that_ask_for_an_inference(tmp_path):
    cache = VectorCache(tmp_path, HashEmbedder())
    conversation = load(FIXTURE)[0]
    corpus = build_corpus(conversation, cache)
    inference, fact = "王磊可能喜欢什么样的音乐？", conversation.questions[0].question
    corpus.query_vectors.update(zip([inference], cache.embed([inference])))
    fusion = Knobs(ranking="fusion")
    knobs = Knobs(ranking="fusion", inference_successors_of="none",
                  inference_lexical_weight=0.0, inference_speaker_boost=3.0)
    assert recall(corpus, fact, knobs) == recall(corpus, fact, fusion)
    changed = recall(corpus, inference, knobs)
    assert changed != recall(corpus, inference, fusion)
    # The question names 王磊: with his turns boosted, the best recalled turn is his.
    assert SPEAKER_LABEL.findall(changed[0].text) == ["王磊"]
