"""Stemming of English words for lexical search (Snowball English, through PyStemmer).

BM25 matches tokens exactly, so "researching" would never find "research", nor "camped"
"camping"; multi-hop questions' evidence often says the same thing in other word forms
(what stemming is worth: docs/decisions.md#stemming-gatewaymemorysearchstemmingpy). Only
ASCII words are stemmed: the English rules would mangle other languages' words, which stay as
written (CJK has no inflection to strip); numbers stay as written.

Invariants: a query and a document go through the same function, so they meet at the same
stems; pure in effect (the same words always give the same stems).
"""

from __future__ import annotations

import threading
from typing import Sequence

import Stemmer

_local = threading.local()


def stemmed(words: Sequence[str]) -> list[str]:
    """`words` (lexical tokens, lowercase) with each English word replaced by its stem."""
    stemmer = _stemmer()
    return [stemmer.stemWord(w) if w.isascii() and not w.isdigit() else w for w in words]


def _stemmer() -> Stemmer.Stemmer:
    """This thread's stemmer: PyStemmer objects keep a cache and are not thread-safe, and
    lexical indexes are built on a worker thread as well as on the event loop."""
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = Stemmer.Stemmer("english")
    return stemmer
