"""The plain retrieval baselines of bench-data/REFERENCE.md, over one conversation's turns.

Each dataset turn is one document, rendered `[<session date>] <speaker>: <text>[ photo]`
(the date of its session on every line). For a question, the turns are ranked by
- `bm25`: BM25 (bm25s) over `gateway.core.text.lexical.tokens` (no stemming, as REFERENCE.md has it;
  the gateway's own index stems English) — lowercase word tokens for space-separated text,
  characters and bigrams for CJK (so Chinese works too);
- `dense`: cosine similarity of USE multilingual v3 embeddings (the gateway's UseEmbedder);
- `hybrid`: reciprocal-rank fusion, k = 60, of the two rankings.
A prompt of at most B tokens (PromptMeter, the harness's own count) is packed greedily by
rank — a turn that does not fit is skipped, smaller ones after it may still fit — and the
chosen turns are shown in chronological order in one system message, followed by the question.

Turns are embedded once per conversation; the rankings of a question are shared by every
budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import bm25s
import numpy as np

from bench.locomo.data import Conversation
from bench.locomo.meter import PromptMeter
from gateway.core.text.lexical import tokens as lexical_tokens
from gateway.memory.embedders.use import UseEmbedder

RETRIEVERS = ("bm25", "dense", "hybrid")
RRF_K = 60
ROLE = "system"

Message = Mapping[str, object]


def turn_lines(conversation: Conversation) -> list[str]:
    """One line per dataset turn, chronological: `[<session date>] <Turn.line>`."""
    return [f"[{s.date}] {t.line}" if s.date else t.line
            for s in conversation.sessions for t in s.turns]


def rrf(*rankings: Sequence[int], k: int = RRF_K) -> list[int]:
    """Document indices by descending reciprocal-rank-fusion score (ties: lower index first)."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, doc in enumerate(ranking, start=1):
            scores[doc] = scores.get(doc, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda d: (-scores[d], d))


def pack(lines: Sequence[str], ranking: Sequence[int], current: Message, budget: int,
         meter: PromptMeter) -> list[Message]:
    """The greedy prompt: turns by rank while they fit, shown chronologically, then `current`.
    Invariant: meter.tokens(result) <= budget unless `current` alone exceeds it."""
    # A line costs its tokens plus one for the newline joining it; the exact count of the
    # joined message is checked at the end (tokens can merge across a newline).
    base = meter.tokens([{"role": ROLE, "content": ""}, current])
    used, chosen = base, []
    for doc in ranking:
        cost = meter.text_tokens(lines[doc]) + 1
        if used + cost <= budget:
            chosen.append(doc)
            used += cost
    while chosen:
        prompt = _prompt(lines, chosen, current)
        if meter.tokens(prompt) <= budget:
            return prompt
        chosen.pop()  # the lowest-ranked turn
    return [current]


def _prompt(lines: Sequence[str], chosen: Sequence[int], current: Message) -> list[Message]:
    return [{"role": ROLE, "content": "\n".join(lines[d] for d in sorted(chosen))}, current]


@dataclass(frozen=True, slots=True)
class Rankings:
    bm25: list[int]
    dense: list[int]
    hybrid: list[int]

    def by_name(self, name: str) -> list[int]:
        return getattr(self, name)


class TurnRetriever:
    """BM25 and dense indexes over one conversation's turn lines."""

    def __init__(self, conversation: Conversation, embedder: UseEmbedder) -> None:
        self.lines = turn_lines(conversation)
        self.embedder = embedder
        self._bm25 = bm25s.BM25()
        self._bm25.index([lexical_tokens(line) or [""] for line in self.lines],
                         show_progress=False)
        self._vectors = embedder.embed(self.lines)

    def rank(self, questions: Sequence[str]) -> list[Rankings]:
        """Every question's three rankings (all turns, best first)."""
        queries = self.embedder.embed(list(questions))
        similarities = queries @ self._vectors.T
        out = []
        for question, sims in zip(questions, similarities):
            terms = lexical_tokens(question)
            scores = (self._bm25.get_scores(terms) if terms
                      else np.zeros(len(self.lines), dtype=np.float32))
            bm25 = _order(scores)
            dense = _order(sims)
            out.append(Rankings(bm25, dense, rrf(bm25, dense)))
        return out


def _order(scores: np.ndarray) -> list[int]:
    """Indices by descending score, ties by index (a stable sort of the negated scores)."""
    return np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable").tolist()
