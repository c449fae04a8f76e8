"""An incremental BM25 index: documents added and removed one at a time, scored at query time.

bm25s (used before, and still by the benchmark's plain baselines) precomputes every
document-token score, so adding one document means rebuilding the whole matrix, once per
recorded turn in every process that searches the conversation (its cost:
docs/decisions.md#an-incremental-bm25-gatewaymemorysearchbm25py). Here the postings are kept
as they are and scored when a query comes: adding a document costs its own tokens, a query
costs the postings of its tokens.

Scores equal bm25s's defaults (method "lucene", k1 1.5, b 0.75) over the live documents — a
test checks it against bm25s on random corpora:
    idf(t)    = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
    score(d)  = Σ_t∈query  idf(t) · tf / (tf + k1 · (1 - b + b · |d| / avgdl))
(a token repeated in the query counts as often as it is repeated, as in bm25s).

Removed documents leave dead postings behind until `compacted()` says a rebuild is due; they
count in no statistic and never score. Not thread-safe: one owner (the event loop) mutates
and searches it.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from typing import Sequence

import numpy as np

K1 = 1.5
B = 0.75


class Bm25:
    """Rows are numbered in the order documents are added; a removed row is never reused."""

    def __init__(self) -> None:
        self._vocab: dict[str, int] = {}
        # Per token: the rows holding it, and its count in each (machine-sized arrays: a
        # posting costs 8 bytes, not two Python objects).
        self._rows: list[array] = []         # of int32
        self._tfs: list[array] = []          # of float32
        self._arrays: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # postings as arrays
        self._df: list[int] = []             # per token: live rows holding it
        self._tokens: list[tuple[int, ...]] = []  # per row: its distinct token ids
        # Per row, grown by doubling (a query reads them whole): token count, liveness.
        self._lengths = np.zeros(64, dtype=np.float32)
        self._alive = np.zeros(64, dtype=bool)
        self.live = 0
        self.postings = 0
        """(token, row) pairs held, live and dead."""
        self._total_length = 0

    def __len__(self) -> int:
        """Rows ever added (live and removed)."""
        return len(self._tokens)

    @property
    def total_length(self) -> int:
        """Tokens in the live documents, summed."""
        return self._total_length

    @property
    def dead(self) -> int:
        return len(self._tokens) - self.live

    def add(self, tokens: Sequence[str]) -> int:
        """Add a document; returns its row."""
        row = len(self._tokens)
        if row == len(self._lengths):
            self._lengths = np.concatenate([self._lengths, np.zeros_like(self._lengths)])
            self._alive = np.concatenate([self._alive, np.zeros_like(self._alive)])
        counts = Counter(tokens)
        ids = []
        for token, count in counts.items():
            t = self._vocab.get(token)
            if t is None:
                t = self._vocab[token] = len(self._df)
                self._rows.append(array("i"))
                self._tfs.append(array("f"))
                self._df.append(0)
            self._rows[t].append(row)
            self._tfs[t].append(float(count))
            self._df[t] += 1
            ids.append(t)
        self.postings += len(ids)
        self._lengths[row] = len(tokens)
        self._tokens.append(tuple(ids))
        self._alive[row] = True
        self.live += 1
        self._total_length += len(tokens)
        return row

    def remove(self, row: int) -> None:
        """Take a document out of every statistic and every result (idempotent)."""
        if not self._alive[row]:
            return
        self._alive[row] = False
        for t in self._tokens[row]:
            self._df[t] -= 1
        self.live -= 1
        self._total_length -= int(self._lengths[row])

    def is_alive(self, row: int) -> bool:
        return bool(self._alive[row])

    def knows_any(self, tokens: Sequence[str]) -> bool:
        """Whether some token of `tokens` occurs in a live document."""
        return any(self._df[t] > 0 for t in (self._vocab.get(x) for x in tokens)
                   if t is not None)

    def scores(self, tokens: Sequence[str]) -> np.ndarray:
        """BM25 score of every row for the query `tokens` (0 for removed rows and rows with no
        query token), float32, indexed by row."""
        rows_in_all = len(self._tokens)
        scores = np.zeros(rows_in_all, dtype=np.float32)
        if not self.live:
            return scores
        n = self.live
        avgdl = self._total_length / n
        lengths = self._lengths[:rows_in_all]
        for token in tokens:
            t = self._vocab.get(token)
            if t is None or self._df[t] == 0:
                continue
            df = self._df[t]
            idf = np.float32(math.log(1 + (n - df + 0.5) / (df + 0.5)))
            rows, tfs = self._postings(t)
            norm = K1 * ((1 - B) + B * lengths[rows] / np.float32(avgdl))
            scores[rows] += idf * (tfs / (norm + tfs))
        if self.dead:
            scores[~self._alive[:rows_in_all]] = 0.0
        return scores

    def _postings(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        cached = self._arrays.get(t)
        if cached is None or len(cached[0]) != len(self._rows[t]):
            cached = (np.array(self._rows[t], dtype=np.int64),
                      np.array(self._tfs[t], dtype=np.float32))
            self._arrays[t] = cached
        return cached
