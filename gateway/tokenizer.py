"""The tiktoken adapter behind core's `Tokenizer`, and the choice of encoding per model.

tiktoken is imported here only; the core counts through the `Tokenizer` protocol. Encodings
load from the files litellm bundles (gateway/_offline.py points tiktoken's cache at them), so
nothing is downloaded. Text is encoded as ordinary text: a special-token string such as
"<|endoftext|>" that a user typed is counted as the characters it is, never rejected.
"""

from __future__ import annotations

import codecs
import functools

import tiktoken

O200K = "o200k_base"
CL100K = "cl100k_base"

# Model families tokenised with o200k_base; every other model is counted with cl100k_base,
# an approximation for non-OpenAI models that is close enough for budgeting.
_O200K_PREFIXES = ("gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4")


class TiktokenTokenizer:
    """Counts and truncates text with one tiktoken encoding. Immutable and thread-safe."""

    __slots__ = ("encoding_name", "_encoding")

    def __init__(self, encoding_name: str) -> None:
        self.encoding_name = encoding_name
        self._encoding = tiktoken.get_encoding(encoding_name)

    def __repr__(self) -> str:
        return f"TiktokenTokenizer({self.encoding_name!r})"

    def count(self, text: str) -> int:
        return len(self._encoding.encode_ordinary(text))

    def truncate(self, text: str, max_tokens: int) -> str:
        """A prefix of `text` with at most `max_tokens` tokens: the text of its first
        `max_tokens` tokens, less a trailing character those tokens only partly cover (one
        token may hold part of a multi-byte character, e.g. in Chinese). Re-encoded alone a
        prefix can take more tokens than it did inside the whole text; in that rare case the
        prefix is shortened until it fits."""
        tokens = self._encoding.encode_ordinary(text)
        if len(tokens) <= max_tokens:
            return text
        n = max(0, max_tokens)
        while n > 0:
            prefix = _complete_utf8(self._encoding.decode_bytes(tokens[:n]))
            if not text.startswith(prefix):
                # tiktoken replaced lone surrogates, so its bytes are not this text's.
                return self._truncate_by_characters(text, max_tokens)
            if self.count(prefix) <= max_tokens:
                return prefix
            n -= 1
        return ""

    def _truncate_by_characters(self, text: str, max_tokens: int) -> str:
        """The longest character prefix within `max_tokens`, by bisection (slow path)."""
        low, high = 0, len(text)
        while low < high:
            mid = (low + high + 1) // 2
            if self.count(text[:mid]) <= max_tokens:
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
    """One shared tokenizer per encoding: building an encoding is expensive (~0.1-1 s)."""
    return TiktokenTokenizer(encoding_name)


def tokenizer_for_model(model: str) -> TiktokenTokenizer:
    return tokenizer_for_encoding(encoding_for_model(model))
