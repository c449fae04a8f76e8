"""The tiktoken adapter behind core's `Tokenizer`, and the choice of encoding per model.

tiktoken is imported here only; the core counts through the `Tokenizer` protocol. Encodings
load from the files litellm bundles (gateway/_offline.py points tiktoken's cache at them), so
nothing is downloaded. Text is encoded as ordinary text: a special-token string such as
"<|endoftext|>" that a user typed is counted as the characters it is, never rejected.

Counting is most of what a rewrite costs, and a conversation's messages, summary chunks and
recalled items come back request after request: each tokenizer keeps the counts (and
truncations) it computed in a bounded LRU keyed by the text itself, so a text is encoded once
per process, not once per request. Equal text, equal count: the cache cannot be stale.
"""

from __future__ import annotations

import codecs
import functools
import threading
from typing import Callable, Generic, Hashable, TypeVar

import tiktoken

O200K = "o200k_base"
CL100K = "cl100k_base"

# Model families tokenised with o200k_base; every other model is counted with cl100k_base,
# an approximation for non-OpenAI models that is close enough for budgeting.
_O200K_PREFIXES = ("gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4")

# Bounds of each tokenizer's caches. Counts: 65,536 texts holding at most 8 million characters
# in all (about 8 MB of text when ASCII, at most 32 MB; a 300-turn conversation of ~100-token
# messages is ~150,000 characters). Truncations: 1,024 (text, limit) pairs, 4 million
# characters of text and prefix. A text longer than its cache's character bound is not kept.
COUNT_CACHE_ENTRIES = 65_536
COUNT_CACHE_CHARS = 8_000_000
TRUNCATE_CACHE_ENTRIES = 1_024
TRUNCATE_CACHE_CHARS = 4_000_000

_WINDOW_CHARS_PER_TOKEN = 32
"""Characters of text encoded per token wanted when truncating (a cl100k token averages ~4
characters of English, ~1 of Chinese; a window this long holds the cut and then some)."""

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """A cache bounded in entries and in the total size of its entries, that evicts the least
    recently used ones in bulk — a least-recently-used cache in two generations, so that a
    hit costs one dict lookup. New entries go into the current generation; when it reaches
    half of either bound it becomes the previous generation, and the one before is dropped. A
    hit in the previous generation moves the entry back into the current one: an entry used
    at least once per generation stays.

    Never holds more than `max_entries` entries or `max_size` size (half of each, rounded
    down, per generation; an entry bigger than half of `max_size` is not kept). Thread-safe:
    a lookup in the current generation reads a dict (atomic under the GIL); everything else
    takes a lock."""

    __slots__ = (
        "_current",
        "_lock",
        "_previous",
        "_previous_size",
        "_size",
        "_sizer",
        "max_entries",
        "max_size",
        "peek",
    )

    def __init__(self, max_entries: int, max_size: int, sizer: Callable[[K, V], int]) -> None:
        self.max_entries = max_entries
        self.max_size = max_size
        self._sizer = sizer
        self._current: dict[K, V] = {}
        self._previous: dict[K, V] = {}
        self.peek: Callable[[K], V | None] = self._current.get
        """The value of `key` if it is in the current generation, else None (then `get` it):
        the dict's own lookup, the fastest there is."""
        self._size = self._previous_size = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._current) + len(self._previous)

    @property
    def size(self) -> int:
        """The total size of the entries held."""
        return self._size + self._previous_size

    def get(self, key: K) -> V | None:
        found = self._current.get(key)
        if found is None and self._previous:
            with self._lock:
                found = self._previous.pop(key, None)
                if found is not None:
                    self._previous_size -= self._sizer(key, found)
                    self._insert(key, found)
        return found

    def put(self, key: K, value: V) -> None:
        with self._lock:
            if key not in self._current:
                if (old := self._previous.pop(key, None)) is not None:
                    self._previous_size -= self._sizer(key, old)
                self._insert(key, value)

    def _insert(self, key: K, value: V) -> None:
        size = self._sizer(key, value)
        half_size, half_entries = self.max_size // 2, self.max_entries // 2
        if size > half_size or half_entries < 1:
            return
        if self._size + size > half_size or len(self._current) >= half_entries:
            # The current dict is kept (and emptied), so `peek` stays bound to it.
            self._previous, self._previous_size = dict(self._current), self._size
            self._current.clear()
            self._size = 0
        self._current[key] = value
        self._size += size


class TiktokenTokenizer:
    """Counts and truncates text with one tiktoken encoding, caching what it computed (see
    the module docstring; the bounds are this class's arguments). Thread-safe; the answer for
    a text never depends on what is cached."""

    __slots__ = ("_counts", "_encoding", "_truncations", "encoding_name")

    adds_up_by_line = True
    """Text made of lines that neither start nor end with a blank, nor start with "/", costs
    the sum of its lines, each counted with its newline: tiktoken's pre-tokenizer (cl100k and
    o200k alike) ends a piece at the newline after a line's last non-blank character, and the
    next line starts a new one (o200k alone carries a "/" right after the newline into the
    piece before). gateway/core/context/packing.py prices recalled blocks on it (their lines start
    with "- " or "["); tests/unit/test_packing.py checks it on random texts in both encodings."""

    def __init__(self, encoding_name: str, *, count_entries: int = COUNT_CACHE_ENTRIES,
                 count_chars: int = COUNT_CACHE_CHARS,
                 truncate_entries: int = TRUNCATE_CACHE_ENTRIES,
                 truncate_chars: int = TRUNCATE_CACHE_CHARS) -> None:
        self.encoding_name = encoding_name
        self._encoding = tiktoken.get_encoding(encoding_name)
        self._counts: BoundedCache[str, int] = BoundedCache(
            count_entries, count_chars, lambda text, _: len(text))
        self._truncations: BoundedCache[tuple[str, int], str] = BoundedCache(
            truncate_entries, truncate_chars, lambda key, prefix: len(key[0]) + len(prefix))

    def __repr__(self) -> str:
        return f"TiktokenTokenizer({self.encoding_name!r})"

    @property
    def cached_texts(self) -> int:
        """How many texts' counts are kept."""
        return len(self._counts)

    def count(self, text: str) -> int:
        n = self._counts.peek(text)
        if n is None:
            n = self._counts.get(text)
            if n is None:
                n = self._count(text)
                self._counts.put(text, n)
        return n

    def _count(self, text: str) -> int:
        """Uncached: for the prefixes truncation tries, which would only crowd the cache."""
        return len(self._encoding.encode_ordinary(text))

    def truncate(self, text: str, max_tokens: int) -> str:
        """A prefix of `text` with at most `max_tokens` tokens: the text of its first
        `max_tokens` tokens, less a trailing character those tokens only partly cover (one
        token may hold part of a multi-byte character, e.g. in Chinese). Re-encoded alone a
        prefix can take more tokens than it did inside the whole text; in that rare case the
        prefix is shortened until it fits."""
        key = (text, max_tokens)
        prefix = self._truncations.get(key)
        if prefix is None:
            prefix = self._truncate(text, max_tokens)
            self._truncations.put(key, prefix)
        return prefix

    def _truncate(self, text: str, max_tokens: int) -> str:
        # The first tokens of a long text are those of a long enough prefix of it: encode a
        # window a few tokens longer than the cut, not a whole 200 KB message per length tried
        # (the rewrite tries several). Too short a window to tell: the whole text.
        window = text[:(max(0, max_tokens) + 2) * _WINDOW_CHARS_PER_TOKEN]
        tokens = self._encoding.encode_ordinary(window)
        if len(window) < len(text) and len(tokens) <= max_tokens + 1:
            tokens = self._encoding.encode_ordinary(text)
        if len(tokens) <= max_tokens:
            return text
        n = max(0, max_tokens)
        while n > 0:
            prefix = _complete_utf8(self._encoding.decode_bytes(tokens[:n]))
            if not text.startswith(prefix):
                # tiktoken replaced lone surrogates, so its bytes are not this text's.
                return self._truncate_by_characters(text, max_tokens)
            if self._count(prefix) <= max_tokens:
                return prefix
            n -= 1
        return ""

    def _truncate_by_characters(self, text: str, max_tokens: int) -> str:
        """The longest character prefix within `max_tokens`, by bisection (slow path)."""
        low, high = 0, len(text)
        while low < high:
            mid = (low + high + 1) // 2
            if self._count(text[:mid]) <= max_tokens:
                low = mid
            else:
                high = mid - 1
        return text[:low]


def _complete_utf8(data: bytes) -> str:
    """`data` decoded, without an incomplete character at its end."""
    return codecs.getincrementaldecoder("utf-8")().decode(data, final=False)


def encoding_for_model(model: str) -> str:
    """o200k_base for the gpt-4o / gpt-4.1 / gpt-4.5 / gpt-5 / o-series families, also behind
    a provider prefix ("openai/gpt-4o", "azure/o3-mini"); cl100k_base for anything else."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    return O200K if name.startswith(_O200K_PREFIXES) else CL100K


@functools.cache
def tokenizer_for_encoding(encoding_name: str) -> TiktokenTokenizer:
    """One shared tokenizer per encoding: building an encoding is expensive (it reads and parses
    the encoding's rank file)."""
    return TiktokenTokenizer(encoding_name)


def tokenizer_for_model(model: str) -> TiktokenTokenizer:
    return tokenizer_for_encoding(encoding_for_model(model))
