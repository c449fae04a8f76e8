"""Scoring one prompt for one question: what of the question's evidence reached the model.

The context scored is the prompt without its last message (the probe question itself), so the
question's own words never count as recalled evidence or answer.

- evidence recall: the share of the question's evidence turns present in the context, a turn
  being present if its line (`<speaker>: <text>[ photo]`) occurs verbatim in one message, or
  if at least `PARTIAL_SHARE` of its content tokens (text and caption, see text.py) occur in
  one message — so a summary or a shortened copy that keeps the substance still counts.
  `evidence_recall_verbatim` counts verbatim presence only (as bench-data/REFERENCE.md does).
  Categories 1–5; None for a question without resolvable evidence.
- answer containment: the gold answer's parts (text.answer_parts) that occur in the full
  history are the findable parts; a question is eligible if it has any; its score is the
  share of findable parts found in the normalised context. Categories 1–4; None if not
  eligible.
- date recall (category 2): the share of evidence turns whose session date string occurs
  verbatim in the context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from bench.locomo.data import Conversation, Question
from bench.locomo.text import answer_parts, contains, content_tokens, normalise

PARTIAL_SHARE = 0.6
ANSWER_CATEGORIES = frozenset({1, 2, 3, 4})
TEMPORAL = 2

Message = Mapping[str, object]


@dataclass(frozen=True, slots=True)
class Score:
    evidence_recall: float | None
    evidence_recall_verbatim: float | None
    answer_containment: float | None
    date_recall: float | None


def _text(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


class Scorer:
    """Scores prompts for one conversation. Normalised texts and token sets of messages are
    memoised by content (history messages recur in every prompt)."""

    def __init__(self, conversation: Conversation, history: Sequence[Message]) -> None:
        self.turns = conversation.turns()
        self.dates = conversation.session_dates()
        self._normalised: dict[str, str] = {}
        self._tokens: dict[str, frozenset[str]] = {}
        self._turn_tokens = {i: content_tokens(t.body) for i, t in self.turns.items()}
        full = self._normalised_context([_text(m) for m in history])
        self.findable: dict[int, list[str]] = {}
        """Question index → answer parts that occur in the full history (eligible if any)."""
        for q in conversation.questions:
            if q.category in ANSWER_CATEGORIES and q.answer is not None:
                self.findable[q.index] = [p for p in answer_parts(q.answer) if contains(full, p)]

    def eligible(self, question: Question) -> bool:
        return bool(self.findable.get(question.index))

    def score(self, question: Question, prompt: Sequence[Message]) -> Score:
        texts = [_text(m) for m in prompt[:-1]]
        recall = verbatim = dates = None
        if question.evidence:
            found = [self._present(i, texts) for i in question.evidence]
            recall = sum(1 for f in found if f) / len(found)
            verbatim = sum(1 for f in found if f == "verbatim") / len(found)
            if question.category == TEMPORAL:
                dates = sum(1 for i in question.evidence
                            if self._date_present(i, texts)) / len(question.evidence)
        containment = None
        parts = self.findable.get(question.index)
        if parts:
            context = self._normalised_context(texts)
            containment = sum(1 for p in parts if contains(context, p)) / len(parts)
        return Score(recall, verbatim, containment, dates)

    def _present(self, dia_id: str, texts: list[str]) -> str | None:
        """"verbatim", "partial" or None."""
        line = self.turns[dia_id].line
        if any(line in t for t in texts):
            return "verbatim"
        wanted = self._turn_tokens[dia_id]
        if wanted:
            need = PARTIAL_SHARE * len(wanted)
            for t in texts:
                if len(wanted & self._content(t)) >= need:
                    return "partial"
        return None

    def _date_present(self, dia_id: str, texts: list[str]) -> bool:
        date = self.dates.get(self.turns[dia_id].session, "")
        return bool(date) and any(date in t for t in texts)

    def _content(self, text: str) -> frozenset[str]:
        tokens = self._tokens.get(text)
        if tokens is None:
            tokens = self._tokens[text] = content_tokens(text)
        return tokens

    def _normalised_context(self, texts: list[str]) -> str:
        out = []
        for t in texts:
            n = self._normalised.get(t)
            if n is None:
                n = self._normalised[t] = normalise(t)
            out.append(n)
        return " ".join(out)
