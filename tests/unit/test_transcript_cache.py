"""The in-process transcript cache (gateway/store/transcript_cache.py) is bounded by the
estimated size of what it holds, not only by counts: a server's long-gone conversations do not
pile up in memory. The estimate follows appends and archive trims, and stays within a factor
of what the decoded messages really take."""

from __future__ import annotations

import gc
import tracemalloc

from gateway.core.ids import ConversationKey
from gateway.core.messages import Message, chain
from gateway.store.codec import encode_stored
from gateway.store.transcript_cache import TranscriptCache, element_bytes, last_sha1


def elements(n: int, text: str = "notes on the quarterly plan and the billing migration",
             start: int = 0) -> list[str]:
    messages = tuple(Message.of("user" if i % 2 == 0 else "assistant", f"{i}: {text}")
                     for i in range(start, start + n))
    return [encode_stored(m) for m in chain(None, messages)]


def key(i: int) -> ConversationKey:
    return ConversationKey("acme", "alice", f"c{i}")


def test_least_recently_used_conversations_leave_beyond_the_byte_budget():
    raw = elements(40)
    one = sum(map(element_bytes, raw))
    cache = TranscriptCache(max_bytes=3 * one + one // 2)
    for i in range(5):
        cache.resolve(key(i), None, 0, raw)
    cache.get(key(2))  # used again: kept over older ones
    cache.resolve(key(5), None, 0, raw)
    assert cache.nbytes <= cache.max_bytes
    assert len(cache) == 3
    assert cache.get(key(2)) is not None and cache.get(key(5)) is not None
    assert cache.get(key(0)) is None and cache.get(key(1)) is None


def test_the_newest_transcript_is_kept_even_when_it_alone_is_over_the_budget():
    cache = TranscriptCache(max_bytes=10)
    cache.resolve(key(0), None, 0, elements(4))
    cache.resolve(key(1), None, 0, elements(4))
    assert len(cache) == 1 and cache.get(key(1)) is not None


def test_the_estimate_follows_appends_and_archive_trims():
    raw = elements(10)
    cache = TranscriptCache()
    cache.resolve(key(0), None, 0, raw[:6])
    assert cache.nbytes == sum(map(element_bytes, raw[:6]))
    cached = cache.get(key(0))
    messages = cache.resolve(key(0), cached, 2, raw[6:])  # the conversation grew
    assert len(messages) == 10 and cache.nbytes == sum(map(element_bytes, raw))
    cached = cache.get(key(0))
    kept = cache.resolve(key(0), cached, 1, [], offset=5)  # five moved to the archive
    assert len(kept) == 5
    assert cache.nbytes == sum(map(element_bytes, raw)) // 2
    assert cache.get(key(0)).last_sha1 == last_sha1(raw)


def test_the_estimate_is_within_a_factor_of_what_decoded_messages_take():
    texts = ("short", "an English reply of a few sentences, " * 40, "我们讨论了预算和招聘计划" * 30)
    for text in texts:
        raw = elements(400, text)
        cache = TranscriptCache()
        gc.collect()
        tracemalloc.start()
        try:
            cache.resolve(key(0), None, 0, raw)
            gc.collect()
            used, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert 0.6 * used <= cache.nbytes <= 1.6 * used, (text[:10], used, cache.nbytes)


def test_a_deleted_conversation_and_an_erased_user_leave_the_cache_and_its_estimate():
    raw = elements(6)
    cache = TranscriptCache()
    others = (ConversationKey("acme", "bob", "c0"), ConversationKey("globex", "alice", "c0"))
    for k in (key(0), key(1), *others):
        cache.resolve(k, None, 0, raw)
    cache.forget(key(0))
    assert cache.get(key(0)) is None and len(cache) == 3
    cache.forget_user("acme", "alice")
    assert cache.get(key(1)) is None
    assert all(cache.get(k) is not None for k in others)  # the same names elsewhere stay
    assert cache.nbytes == 2 * sum(map(element_bytes, raw))


def test_a_load_that_finds_no_transcript_drops_the_cached_one():
    cache = TranscriptCache()
    cache.resolve(key(0), None, 0, elements(4))
    cached = cache.get(key(0))
    assert cache.resolve(key(0), cached, 0, []) == ()  # the store has none: deleted
    assert cache.get(key(0)) is None and cache.nbytes == 0
