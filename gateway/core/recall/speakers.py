"""Speaker labels: who a stored turn's lines say spoke (`Ada: ...`, `王磊：...`).

A turn's labels are read from its text once, when its recall item is made
(gateway/core/recall/recollection.py), and carried with it; the learned ranking
(gateway/core/recall/ranking.py, feature `speaker_named`) asks whether the question names one.

Invariants: pure; a label is a line's leading name (after a date anchor `[<date>] ` if any),
up to 40 characters, ending in an ASCII or full-width colon; labels in order of their lines,
repeats kept.
"""

from __future__ import annotations

import re

SPEAKER_LABEL = re.compile(r"^(?:\[[^\]\n]*\] )?([^\W\d][\w .'-]{0,39})[:：]", re.MULTILINE)
"""A line's speaker label (`Ada: ...`, `王磊：...`, after a date anchor `[<date>] ` if any)."""


def speaker_labels(text: str) -> tuple[str, ...]:
    """The speaker labels of `text`'s lines (empty when none)."""
    # A label ends in a colon (one scan in C); most turns are one line, and a match at the
    # start is cheaper than a search of every line.
    if ":" not in text and "\uff1a" not in text:
        return ()
    if "\n" in text:
        return tuple(SPEAKER_LABEL.findall(text))
    match = SPEAKER_LABEL.match(text)
    return (match.group(1),) if match is not None else ()
