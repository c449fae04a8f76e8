"""Scoring one prompt for one question: what of the question's evidence reached the model.

The context scored is the prompt without its last message (the probe question itself), so the
question's own words never count as recalled evidence or answer.

Headline metrics (strict, as bench-data/REFERENCE.md defines them):
- evidence recall: the share of the question's evidence turns present in the context, a turn
  being present only if its line as the client renders it (`Turn.line`:
  `<speaker>: <text>[ [shares a photo: <caption>]]`) occurs verbatim in one message, both
  compared after `text.collapse` (NFKC, whitespace collapsed). Categories 1–5; None for a
  question without resolvable evidence.
- answer containment: the WHOLE normalised gold answer (`text.normalise`) is a substring of
  the normalised context. A question is eligible if its normalised answer is a substring of
  the normalised full history (the client's rendered conversation). Categories 1–4; None if
  not eligible.
- date recall (category 2): the share of evidence turns whose session date string occurs
  verbatim in the context.

Secondary, lenient figures (kept in the JSON under their own names, never the headline):
- `evidence_recall_lenient`: a turn also counts if at least `PARTIAL_SHARE` of its content
  tokens (text.content_tokens of text and caption) occur in one message (a summary that keeps
  the substance);
- `answer_containment_parts`: the share of the answer's parts (text.answer_parts) that occur
  in the context, over the parts that occur in the full history; None if none does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from bench.locomo.data import Conversation, Question
from bench.locomo.text import answer_parts, collapse, contains, content_tokens, normalise

PARTIAL_SHARE = 0.6
ANSWER_CATEGORIES = frozenset({1, 2, 3, 4})
TEMPORAL = 2

Message = Mapping[str, object]


@dataclass(frozen=True, slots=True)
class Score:
    evidence_recall: float | None
    answer_containment: float | None
    date_recall: float | None
    evidence_recall_lenient: float | None
    answer_containment_parts: float | None


def text_of(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


class Scorer:
    """Scores prompts for one conversation. Collapsed and normalised texts and token sets of
    messages are memoised by content (history messages recur in every prompt)."""

    def __init__(self, conversation: Conversation, history: Sequence[Message]) -> None:
        self.turns = conversation.turns()
        self.dates = conversation.session_dates()
        self._lines = {i: collapse(t.line) for i, t in self.turns.items()}
        self._collapsed: dict[str, str] = {}
        self._normalised: dict[str, str] = {}
        self._tokens: dict[str, frozenset[str]] = {}
        self._turn_tokens = {i: content_tokens(t.body) for i, t in self.turns.items()}
        full = self._normalised_context([text_of(m) for m in history])
        self.answers: dict[int, str] = {}
        """Question index → normalised answer, for the eligible questions only."""
        self.findable: dict[int, list[str]] = {}
        """Question index → answer parts that occur in the full history (lenient figure)."""
        for q in conversation.questions:
            if q.category not in ANSWER_CATEGORIES or q.answer is None:
                continue
            answer = normalise(q.answer)
            if answer and answer in full:
                self.answers[q.index] = answer
            if parts := [p for p in answer_parts(q.answer) if contains(full, p)]:
                self.findable[q.index] = parts

    def eligible(self, question: Question) -> bool:
        return question.index in self.answers

    def score(self, question: Question, prompt: Sequence[Message]) -> Score:
        texts = [text_of(m) for m in prompt[:-1]]
        recall = lenient = dates = None
        if question.evidence:
            collapsed = [self._collapse(t) for t in texts]
            found = [self._present(i, texts, collapsed) for i in question.evidence]
            recall = sum(1 for f in found if f == "verbatim") / len(found)
            lenient = sum(1 for f in found if f) / len(found)
            if question.category == TEMPORAL:
                dates = sum(1 for i in question.evidence
                            if self._date_present(i, texts)) / len(question.evidence)
        containment = parts_found = None
        answer, parts = self.answers.get(question.index), self.findable.get(question.index)
        if answer or parts:
            context = self._normalised_context(texts)
            if answer:
                containment = float(answer in context)
            if parts:
                parts_found = sum(1 for p in parts if contains(context, p)) / len(parts)
        return Score(recall, containment, dates, lenient, parts_found)

    def _present(self, dia_id: str, texts: list[str], collapsed: list[str]) -> str | None:
        """"verbatim", "partial" or None."""
        line = self._lines[dia_id]
        if any(line in t for t in collapsed):
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

    def _collapse(self, text: str) -> str:
        out = self._collapsed.get(text)
        if out is None:
            out = self._collapsed[text] = collapse(text)
        return out

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
