"""An offline simulation of the gateway's recall and rewrite on a LoCoMo-schema file: for
tuning recall quickly and by leave-one-conversation-out, not for reporting headline figures
(`python -m bench locomo` measures the real gateway; this runs in seconds once vectors are
cached).

What it reproduces, with the gateway's own code wherever the code is pure:
- the stored transcript of a `stateless`/`stateful` client (bench/locomo/script.py), its turn
  entries, context texts and anchors (`gateway.memory.jobs.turn_index.turn_entries`);
- dense search (USE, exact inner product as FAISS IndexFlatIP) and stemmed BM25
  (`gateway.memory.search.bm25.Bm25` over `lexical_index`'s tokens), then `Recaller.recall`'s
  own assembly of the hits (`gateway.core.recall.assembly`: fusion with context ranking, the
  learned ranking of the fused candidates, the best k, successors, relevance), with the
  learned ranking's weights trained without the conversation (`--ranker held-out`, as
  `bench locomo` does by default) or the shipped ones;
- the floor and gate below which a recalled item is not forwarded
  (`gateway.core.recall.relevance.above_floor`, the embedder's calibrated thresholds unless a
  knob sets them, as a tenant's `memory.recall_relevance_floor` / `_gate` do);
- the rewrite (`gateway.core.context.rewrite.rewrite`) with the bench tenant's policy, scored with
the
  harness's Scorer (strict rules).
What it leaves out: summary chunks (compacted by the worker on its own timing; also
recallable in the gateway), the user namespace (`sessions` mode) and facts (off by
default). So its figures sit near, not on, the gateway's (bench/README.md, "Tuning recall offline").

    python -m bench locomo-simulate [--data PATH[@B1,B2] ...] [--budgets 2000]
                                    [--set NAME=VALUE ...] [--loo NAME=V1,V2]
                                    [--ranker held-out|shipped] [--out FILE.md]

Without `--data`: the three shapes side by side (bench/locomo/shapes.py: LoCoMo dev at 2,000
tokens, MemoryBank-en and -zh at 500 and 1,000); `PATH@B1,B2` gives a file its own budgets,
else `--budgets`. Each (file, budget) reports evidence recall overall and per category and the
null probes' recalled tokens (bench/locomo/null_probes.py).

Vectors are cached in `--cache` (default: a directory under the system temp dir), keyed by
the embedder and a digest of the texts: nothing of the data is written into the repository.
The command line is bench/locomo/simulate_cli.py (this docstring is its help).
"""

from __future__ import annotations

import datetime
import itertools
import json
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from bench.locomo.data import CATEGORIES, Conversation
from bench.locomo.meter import PromptMeter
from bench.locomo.null_probes import null_probes, recalled_tokens
from bench.locomo.question_form import asks_inference
from bench.locomo.replay import RESERVE
from bench.locomo.score import Scorer
from bench.locomo.script import build_script
from bench.locomo.vector_cache import VectorCache
from gateway.config.memory import TenantMemoryConfig
from gateway.core.recall import assembly
from gateway.core.recall.assembly import Fused, fused_order
from gateway.core.recall.fusion import RECENCY_WEIGHT, RRF_K
from gateway.core.context.blocks import MemoryContext
from gateway.core.messages import Message, chain
from gateway.core.policy import ContextPolicy
from gateway.core.recall.recollection import Recollection
from gateway.core.recall.ranker_weights import DEV_WEIGHTS
from gateway.core.recall.ranking import DEPTH as RANKING_DEPTH
from gateway.core.recall.ranking import Candidate, Ranker, speaker_named
from gateway.core.recall.need import Need, asked, memory_need, search_text
from gateway.core.recall.relevance import above_floor
from gateway.core.context.rewrite import RewriteRequest, rewrite
from gateway.memory.search.bm25 import Bm25
from gateway.memory.recall.entry_cache import Link
from gateway.memory.search.lexical_index import document_terms, query_terms
from gateway.memory.search.segmentation import segmenter
from gateway.memory.jobs.turn_index import TurnEntry, turn_entries
from gateway.tokenizer import CL100K, tokenizer_for_encoding

DEFAULT_DATA = str(Path(__file__).resolve().parents[3] / "shared" / "bench-data"
                   / "locomo-dev.json")
"""What `locomo-ranker` reads by default."""


@dataclass(frozen=True, slots=True)
class Knobs:
    """The recall settings a simulation varies (defaults: the gateway's)."""

    top_k: int = 70
    rrf_k: int = RRF_K
    recency_weight: float = RECENCY_WEIGHT
    successors: bool = True
    successors_of: str = "questions"
    """"all" turns recalled, or only those that ask something ("questions")."""
    context: bool = True
    # For a question that asks for an inference (`bench.locomo.question_form.asks_inference`)
    # only; the defaults leave it recalled like any other (bench/README.md, "Open-domain (category
    # 3)").
    inference_successors_of: str = "questions"
    """"all", "questions" or "none": which recalled turns bring the turn after them."""
    inference_lexical_weight: float = 1.0
    """The BM25 ranking's weight in the fusion (the dense ranking's is 1)."""
    inference_speaker_boost: float = 1.0
    """Fused scores of the turns spoken by a person the question names (a line-initial
    `Name:` label, as the LoCoMo client renders turns) are multiplied by this."""
    ranking: str = "learned"
    """"learned": the fused candidates re-ranked by `ranker` (`gateway.core.recall.ranking`);
    "fusion": the fused order."""
    ranker: Ranker = Ranker.of(DEV_WEIGHTS)
    """The gateway's by default — trained on the dev split: figures with it on the dev split
    are in-sample (`python -m bench locomo-ranker` measures it held out)."""
    depth: int | None = None
    """Hits each search contributes (None: as the recaller, top_k and at least 20, and at
    least the ranking's depth when it re-ranks)."""
    relevance_floor: float | None = None
    """Recalled items less relevant than this are not forwarded (None: the embedder's
    calibrated floor, as in the gateway; -1: none is dropped)."""
    relevance_gate: float | None = None
    """None is forwarded when not one item reaches this (None: the embedder's; -1: off)."""
    per_relevant: int = TenantMemoryConfig().recall_items_per_relevant
    """With a gate, at most this many items per one that reaches it (0: no cap)."""


@dataclass(slots=True)
class Corpus:
    """One conversation as the gateway indexed it."""

    conversation: Conversation
    messages: tuple[Message, ...]
    ids: tuple[str, ...]
    entries: list[TurnEntry]
    vectors: np.ndarray
    """Row i: the context vector of entries[i]."""
    bm25: Bm25
    scorer: Scorer
    by_id: dict[str, int] = field(default_factory=dict)
    following: dict[str, str] = field(default_factory=dict)
    previous: dict[str, str] = field(default_factory=dict)
    query_vectors: dict[str, np.ndarray] = field(default_factory=dict)
    segment: bool = True
    """Chinese cut into words (the gateway's default), else characters and bigrams."""
    latest: datetime.date | None = None
    """The latest day of its turns (what the lexical index resolves relative days from)."""
    relevance_floor: float | None = None
    relevance_gate: float | None = None
    """The embedder's calibrated thresholds (gateway/memory/embedders/; None: none)."""
    ranker: Ranker | None = None
    """The learned ranking's weights for this conversation (None: the knobs')."""
    extra: dict[str, Any] = field(default_factory=dict)
    """What an experiment's recall keeps per conversation."""


def lexical_tokens(text: str, segment: bool = True, today: datetime.date | None = None,
                   ) -> list[str]:
    """A query's terms as the gateway's lexical index makes them (stemming on, its default;
    `segment`: `memory.index.segmentation`; `today`: the conversation's latest day)."""
    return query_terms(text, today, segment=segmenter(segment))


def build_corpus(conversation: Conversation, cache: VectorCache, *,
                 context: bool = True, segment: bool = True) -> Corpus:
    script = build_script(conversation)
    messages = tuple(Message.of(m["role"], m["content"]) for m in script.messages)
    stored = chain(None, messages)
    entries = turn_entries(stored, context=context)
    vectors = cache.embed([e.embed_text for e in entries])
    bm25 = Bm25()
    days = []
    for e in entries:
        words, day = document_terms(e.text, segment=segmenter(segment))
        bm25.add(words)
        days.append(day)
    corpus = Corpus(conversation, messages, tuple(s.id for s in stored), entries, vectors,
                    bm25, Scorer(conversation, script.messages), segment=segment,
                    latest=max((d for d in days if d is not None), default=None),
                    relevance_floor=getattr(cache.embedder, "relevance_floor", None),
                    relevance_gate=getattr(cache.embedder, "relevance_gate", None))
    corpus.by_id = {e.id: i for i, e in enumerate(entries)}
    corpus.following = {e.previous: e.id for e in entries if e.previous is not None}
    corpus.previous = {e.id: e.previous for e in entries if e.previous is not None}
    corpus.query_vectors = dict(zip(
        [search_text(q.asked) for q in conversation.questions],
        cache.embed([search_text(q.asked) for q in conversation.questions])))
    return corpus


def fused(corpus: Corpus, query: str, knobs: Knobs, today: datetime.date | None = None
          ) -> Fused:
    """`Recaller.recall`'s fused candidates for a conversation namespace
    (`gateway.core.recall.assembly.fused_order`), over the simulated indexes: the dense hits
    (exact inner product) and the stemmed BM25 hits at the recaller's depth (`today`: the day
    the query's relative days count from, else the conversation's latest)."""
    depth = knobs.depth or max(knobs.top_k, 20, RANKING_DEPTH if knobs.ranking == "learned"
                               else 0)
    sims = corpus.vectors @ corpus.query_vectors[query]
    order = np.argsort(-sims, kind="stable")[:depth]
    scores = corpus.bm25.scores(lexical_tokens(query, corpus.segment, today or corpus.latest))
    n = min(depth, len(scores))
    top = np.argpartition(-scores, n - 1)[:n]
    top = top[np.argsort(-scores[top], kind="stable")]
    inference = asks_inference(query)
    boost = knobs.inference_speaker_boost if inference else 1.0
    return fused_order([(corpus.entries[i].id, float(sims[i])) for i in order],
                       [[(corpus.entries[i].id, float(scores[i])) for i in top if scores[i] > 0]],
                       _items(corpus), corpus.previous, ranked=knobs.ranking == "learned",
                       rrf_k=knobs.rrf_k, recency_weight=knobs.recency_weight,
                       context=knobs.context,
                       lexical_weight=knobs.inference_lexical_weight if inference else 1.0,
                       rescore=None if boost == 1.0
                       else lambda hits: _speakers_first(corpus, query, hits, boost))


def candidates(corpus: Corpus, query: str, knobs: Knobs) -> list[Candidate]:
    """`Recaller.recall`'s candidates for a conversation namespace, in fused order, with what
    the recaller knows of each (`gateway.core.recall.ranking.Candidate`)."""
    return assembly.candidates(fused(corpus, query, knobs), _items(corpus), _links(corpus))


def recall(corpus: Corpus, query: str, knobs: Knobs) -> list[Recollection]:
    """`Recaller.recall` for a conversation namespace, over the simulated indexes, through the
    gateway's own assembly (`gateway.core.recall.assembly`), and what the recall service
    forwards of it (`above_floor`: the items at or above the relevance floor, none below the
    gate unless the message refers to the past, none at all for a message that needs no
    memory: gateway/core/recall/need.py), the message read as recall reads it (`search_text`,
    its relative days from the day it is asked on: `asked`)."""
    need = memory_need(query)
    if need is Need.NONE:
        return []
    today, query = asked(query)
    successors_of = knobs.inference_successors_of if asks_inference(query) \
        else knobs.successors_of
    found = fused(corpus, query, knobs, today)
    items, links = _items(corpus), _links(corpus)
    chosen = assembly.best(query, found, items, links, top_k=knobs.top_k, today=today,
                           ranker=(corpus.ranker or knobs.ranker)
                           if knobs.ranking == "learned" else None,
                           successors=knobs.successors and successors_of != "none",
                           successors_of=successors_of)
    recalled = assembly.recollections(chosen, items, found.similarity,
                                      assembly.adjacent(links))
    floor = corpus.relevance_floor if knobs.relevance_floor is None else knobs.relevance_floor
    gate = corpus.relevance_gate if knobs.relevance_gate is None else knobs.relevance_gate
    return list(above_floor(recalled, floor, gate, need, knobs.per_relevant))


def _items(corpus: Corpus) -> dict[str, Recollection]:
    """What the recaller's entry reads give of each turn (made once a corpus)."""
    if "items" not in corpus.extra:
        corpus.extra["items"] = {e.id: Recollection("turn", e.id, e.text, (e.id,), e.position,
                                                    0.0, role=e.role) for e in corpus.entries}
    return corpus.extra["items"]


def _links(corpus: Corpus) -> dict[str, Link]:
    """Each turn's neighbours, as the recaller's entry reads give them (made once a corpus)."""
    if "links" not in corpus.extra:
        corpus.extra["links"] = {e.id: Link(corpus.previous.get(e.id),
                                            corpus.following.get(e.id))
                                 for e in corpus.entries}
    return corpus.extra["links"]


def _speakers_first(corpus: Corpus, query: str, fused: list[tuple[str, float]],
                    boost: float) -> list[tuple[str, float]]:
    """An experiment (`Knobs.inference_speaker_boost`): `fused` with the scores of turns
    spoken by a person `query` names times `boost`."""
    boosted = [(i, score * boost if speaker_named(corpus.entries[corpus.by_id[i]].text, query)
                else score) for i, score in fused]
    return sorted(boosted, key=lambda pair: -pair[1])


Recall = Callable[[Corpus, str, Knobs], list[Recollection]]


def prompt(corpus: Corpus, question: str, recalled: Sequence[Recollection],
           budget: int) -> list[dict[str, Any]]:
    """The messages the gateway would forward for a stateless probe."""
    policy = ContextPolicy(max_context_tokens=budget + RESERVE, compact_to_tokens=0,
                           reserve_completion_tokens=RESERVE)
    request = RewriteRequest(instructions=(), history=corpus.messages,
                             current=(Message.of("user", question),), policy=policy,
                             memory=MemoryContext(recalled=tuple(recalled)),
                             history_ids=corpus.ids)
    return [m.to_openai() for m in rewrite(request, TOKENIZER).messages]


TOKENIZER = tokenizer_for_encoding(CL100K)


@dataclass(frozen=True, slots=True)
class Result:
    """Evidence recall per (conversation, question index), and each question's category."""

    recall: dict[tuple[str, int], float]
    category: dict[tuple[str, int], int]

    def mean(self, *, conversations: Sequence[str] | None = None,
             categories: Sequence[int] | None = None) -> float:
        values = [v for key, v in self.recall.items()
                  if (conversations is None or key[0] in conversations)
                  and (categories is None or self.category[key] in categories)]
        return statistics.fmean(values) if values else float("nan")


def simulate(corpora: Sequence[Corpus], budget: int, knobs: Knobs,
             recall_fn: Recall = recall) -> Result:
    values: dict[tuple[str, int], float] = {}
    category: dict[tuple[str, int], int] = {}
    for corpus in corpora:
        for q in corpus.conversation.questions:
            # Asked as the harness's client asks it (dated when the data dates it).
            messages = prompt(corpus, q.asked, recall_fn(corpus, q.asked, knobs), budget)
            score = corpus.scorer.score(q, messages)
            if score.evidence_recall is not None:
                key = (corpus.conversation.sample_id, q.index)
                values[key] = score.evidence_recall
                category[key] = q.category
    return Result(values, category)


def report(result: Result, label: str) -> str:
    parts = [f"{result.mean():.3f}"] + [
        f"{CATEGORIES[c][:5]} {result.mean(categories=[c]):.3f}"
        for c in sorted(set(result.category.values()))]
    return f"{label:<40} all {' '.join(parts)}"


def parse_value(text: str) -> Any:
    """A knob's value: JSON (numbers, true/false), else the text itself (`questions`)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def null_probe_tokens(corpora: Sequence[Corpus], budget: int, knobs: Knobs) -> float:
    """The null probes' recalled tokens, mean per probe (bench/locomo/null_probes.py)."""
    meter = PromptMeter()
    return statistics.fmean(
        recalled_tokens(meter, prompt(corpus, probe, recall(corpus, probe, knobs), budget))
        for corpus in corpora
        for probe in null_probes([str(m.content) for m in corpus.messages]))


def table(rows: Sequence[tuple[str, Result, float]]) -> str:
    """The (file, budget) rows side by side: evidence recall overall and per category, and
    the null probes' recalled tokens."""
    present = sorted({c for _, r, _ in rows for c in r.category.values()})
    head = ("| data, budget | evidence recall | "
            + " | ".join(f"{c} {CATEGORIES[c]}" for c in present)
            + " | null-probe recalled tokens |")
    out = [head, "|---|" + "---:|" * (len(present) + 2)]
    for label, result, tokens in rows:
        cats = " | ".join(
            f"{result.mean(categories=[c]):.3f}" if c in result.category.values() else "–"
            for c in present)
        out.append(f"| {label} | {result.mean():.3f} | {cats} | {tokens:.0f} |")
    return "\n".join(out)


def leave_one_out(corpora: Sequence[Corpus], budget: int, base: Knobs,
                  grid: Sequence[tuple[str, list[Any]]], *, label: str | None = None,
                  say: Callable[[str], None] = print) -> None:
    """For each conversation, pick the grid point best on the others; report the held-out
    figure of each fold's pick."""
    label = label or str(budget)
    points = [dict(zip([n for n, _ in grid], combo))
              for combo in itertools.product(*[values for _, values in grid])]
    results = {json.dumps(p): simulate(corpora, budget, replace(base, **p)) for p in points}
    for key, result in results.items():
        say(report(result, f"{label} {key}"))
    ids = [c.conversation.sample_id for c in corpora]
    held: dict[tuple[str, int], float] = {}
    category: dict[tuple[str, int], int] = {}
    for out in ids:
        rest = [i for i in ids if i != out]
        best = max(results, key=lambda k: results[k].mean(conversations=rest))
        chosen = results[best]
        say(f"  fold {out}: picked {best} (train {chosen.mean(conversations=rest):.3f}, "
              f"held-out {chosen.mean(conversations=[out]):.3f})")
        for key, value in chosen.recall.items():
            if key[0] == out:
                held[key], category[key] = value, chosen.category[key]
    say(report(Result(held, category), f"{label} held-out"))

