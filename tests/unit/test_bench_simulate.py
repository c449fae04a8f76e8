"""The offline recall simulation (bench/locomo/simulate.py) on the project's Chinese fixture:
its prompts are the gateway's rewrite of what it recalls, so they fit the budget and keep the
client's question last; every question with evidence is scored; what it forwards is what the
relevance floor and gate keep; held-out ranking; the shapes it reports side by side."""

from __future__ import annotations

import ast
from pathlib import Path

from bench.locomo import simulate as simulation
from bench.locomo.data import load
from bench.locomo.meter import PromptMeter
from bench.locomo.ranker import held_out_rankers
from bench.locomo.shapes import SHAPES, Shape, column, parse, shapes
from bench.locomo.simulate import Knobs, build_corpus, prompt, recall, simulate
from bench.locomo.vector_cache import VectorCache
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


def test_the_simulation_forwards_what_the_relevance_floor_and_gate_keep(tmp_path):
    cache = VectorCache(tmp_path, HashEmbedder())
    corpus = build_corpus(load(FIXTURE)[0], cache)
    q = corpus.conversation.questions[0].question
    everything = recall(corpus, q, Knobs(relevance_floor=-1, relevance_gate=-1))
    assert everything and all(r.relevance is not None for r in everything)
    # The test embedder is not calibrated: nothing dropped by default, as in the gateway.
    assert corpus.relevance_floor is None and recall(corpus, q, Knobs()) == everything
    middle = sorted(r.relevance for r in everything)[len(everything) // 2]
    floored = recall(corpus, q, Knobs(relevance_floor=middle))
    assert floored == [r for r in everything if r.relevance >= middle] != everything
    best = max(r.relevance for r in everything)
    assert recall(corpus, q, Knobs(relevance_gate=best + 1e-6)) == []
    assert recall(corpus, q, Knobs(relevance_gate=best, per_relevant=0)) == everything
    # With the cap, as the gateway's: per item that reaches the gate, that many, best-ranked.
    reaching = sum(1 for r in everything if r.relevance >= best)
    assert len(everything) > 2 * reaching
    assert recall(corpus, q, Knobs(relevance_gate=best, per_relevant=2)) \
        == everything[:2 * reaching]

    class Calibrated(HashEmbedder):
        relevance_floor, relevance_gate = middle, best + 1e-6

    calibrated = build_corpus(load(FIXTURE)[0], VectorCache(tmp_path / "c", Calibrated()))
    assert (calibrated.relevance_floor, calibrated.relevance_gate) == (middle, best + 1e-6)
    assert recall(calibrated, q, Knobs()) == []  # the embedder's gate, as the gateway's
    assert recall(calibrated, q, Knobs(relevance_gate=-1)) == floored
    # A message that needs no memory recalls nothing, whatever the thresholds, as the gateway.
    assert recall(corpus, "Thanks so much, see you tomorrow!",
                  Knobs(relevance_floor=-1, relevance_gate=-1)) == []


def test_held_out_ranking_gives_each_conversation_weights_trained_without_it(tmp_path):
    cache = VectorCache(tmp_path, HashEmbedder())
    corpora = [build_corpus(c, cache) for c in load(FIXTURE)]
    held_out_rankers(corpora)
    rankers = [c.ranker for c in corpora]
    assert all(r is not None for r in rankers)
    assert len({tuple(sorted(r.to_dict().items())) for r in rankers}) == len(corpora)


def test_shapes_name_a_file_and_its_budgets():
    assert parse("/d/memorybank-zh-dev.json@500,1000") == Shape(
        Path("/d/memorybank-zh-dev.json"), (500, 1000))
    assert parse("/d/x@y/locomo-dev.json", (2000,)).budgets == (2000,)
    assert [(s.name, s.budgets) for s in shapes(None)] == [
        ("LoCoMo dev", (2000,)), ("MemoryBank-en", (500, 1000)), ("MemoryBank-zh", (500, 1000))]
    assert [s.budgets for s in shapes(None, (4000,))] == [(4000,)] * 3
    assert column(SHAPES[1], 1000) == "MemoryBank-en 1,000"


STEPS = {"fuse", "reciprocal_rank_fusion", "with_context", "with_successors", "gather",
         "relevances", "with_relevance", "boost_same_topic"}
"""Recall's steps, which the simulation reaches only through `gateway.core.recall.assembly`."""


def test_the_simulation_runs_the_gateways_recall_assembly_not_a_copy_of_its_steps():
    tree = ast.parse(Path(simulation.__file__).read_text(encoding="utf-8"))
    imported = {alias.asname or alias.name for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) for alias in node.names}
    called = {node.func.id for node in ast.walk(tree)
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert not (imported | called) & STEPS
    assert {"fused_order", "assembly"} <= imported
