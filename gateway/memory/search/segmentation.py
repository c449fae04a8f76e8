"""Chinese word segmentation for lexical search (jieba's dictionary and HMM, through rjieba).

BM25 over Chinese text needs words; the text has no spaces. Character bigrams (the fallback in
`gateway.core.text.lexical`) match "北京" but also every bigram that straddles two words
("在北"), so short question-shaped turns share many bigrams with any question. Dictionary
words instead of characters and bigrams keep more evidence on the MemoryBank-zh dev set
(bench/README.md, "User–assistant chats in two languages").

rjieba (the Rust jieba-rs, its dictionary compiled in) loads that dictionary when first
imported and never touches the network or the disk after; `warm()` does it at start-up so no
request waits for it (the load and a cut's cost:
docs/decisions.md#segmentation-loads-at-start-up-gatewaymemorysearchsegmentationpy).

Invariants: pure in effect (the same run always gives the same words, on any thread); the words
of a run concatenate to the run.
"""

from __future__ import annotations

import functools
from typing import Callable

from gateway.core.text.lexical import Segmenter


def words(run: str) -> list[str]:
    """The words of one run of CJK characters, in order (`gateway.core.text.lexical.Segmenter`)."""
    return _cut()(run)


def warm() -> None:
    """Load the dictionary now (start-up), not on the first request that holds Chinese."""
    words("预热")


def segmenter(enabled: bool) -> Segmenter | None:
    """`words` when segmentation is on, else None (character bigrams)."""
    if not enabled:
        return None
    warm()
    return words


@functools.cache
def _cut() -> Callable[[str], list[str]]:
    import rjieba  # the dictionary loads here, once per process

    return rjieba.cut
