"""What memory offers for one request: recollections, ranked by relevance to the question."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Literal

from gateway.core.recall.speakers import speaker_labels
from gateway.core.text.days import UNREAD, Unread, day_of

RecollectionKind = Literal["turn", "chunk", "fact"]


@dataclass(frozen=True, slots=True)
class Recollection:
    """One item memory can put before the model.

    `text` is what the model sees: redacted, and carrying its date anchor when it has one.
    `source_ids` are the stored message ids it stems from, so an item already present verbatim
    in the recent window is not sent twice.
    """

    kind: RecollectionKind
    id: str
    text: str
    source_ids: tuple[str, ...]
    position: int
    """Place in the conversation (a turn's index, a chunk's first turn); -1 for facts. When
    items of the user's other conversations are recalled too, a place in one order across
    them: theirs first (older conversations first), then the current conversation's."""
    score: float
    """Fused relevance to the current question; higher is better. Relative: only its order
    within one recall means something."""
    relevance: float | None = None
    """Absolute relevance to the current question (gateway/core/recall/relevance.py: a dense
    similarity, on the embedder's scale); None: unknown (never dropped by the floor)."""
    role: str | None = None
    """Who said a turn ("user", "assistant"), when known."""
    day: datetime.date | None | Unread = UNREAD
    """The day a turn or chunk was said on (`core.text.days.day_of` of its text; None: no
    day, and always for a fact). Derived from `text` once, when the item is made, unless given:
    `dataclasses.replace` carries it, so a recall that re-places and re-scores its items never
    reads a date again."""
    speakers: tuple[str, ...] | Unread = UNREAD
    """The speaker labels of a turn's or chunk's lines (`core.recall.speakers`; empty for a
    fact), derived from `text` once, when the item is made, unless given, and carried like
    `day`."""

    def __post_init__(self) -> None:
        if self.day is UNREAD:
            object.__setattr__(self, "day", day_of(self.text) if self.kind != "fact" else None)
        if self.speakers is UNREAD:
            object.__setattr__(self, "speakers",
                               speaker_labels(self.text) if self.kind != "fact" else ())

    def changed(self, *, position: int | None = None, score: float | None = None,
                relevance: float | None = None) -> Recollection:
        """This item at another `position`, with another `score` or `relevance` (the ones
        given); everything else, its day and speakers included, as it is. Built by the
        constructor directly: recall re-places and re-scores every candidate of every
        request."""
        return Recollection(self.kind, self.id, self.text, self.source_ids,
                            self.position if position is None else position,
                            self.score if score is None else score,
                            self.relevance if relevance is None else relevance,
                            self.role, self.day, self.speakers)
