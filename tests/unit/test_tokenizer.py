import os
import pathlib
import re
import subprocess
import sys
import threading

import pytest
import tiktoken

from gateway.tokenizer import (
    CL100K,
    O200K,
    BoundedCache,
    TiktokenTokenizer,
    encoding_for_model,
    tokenizer_for_encoding,
    tokenizer_for_model,
)

CHINESE = "你好，世界！今天天气很好。我们去公园散步吧，然后吃午饭。"


@pytest.fixture(scope="module", params=[CL100K, O200K])
def tokenizer(request) -> TiktokenTokenizer:
    return tokenizer_for_encoding(request.param)


@pytest.mark.parametrize("model, encoding", [
    ("gpt-4o", O200K),
    ("gpt-4o-mini-2024-07-18", O200K),
    ("chatgpt-4o-latest", O200K),
    ("gpt-4.1-nano", O200K),
    ("gpt-4.5-preview", O200K),
    ("gpt-5", O200K),
    ("gpt-5-mini", O200K),
    ("o1", O200K),
    ("o1-mini", O200K),
    ("o3-mini", O200K),
    ("o4-mini", O200K),
    ("openai/gpt-4o", O200K),
    ("azure/o3-mini", O200K),
    ("openrouter/openai/gpt-4.1", O200K),
    ("GPT-4o", O200K),
    ("gpt-4", CL100K),
    ("gpt-4-turbo", CL100K),
    ("gpt-3.5-turbo", CL100K),
    ("azure/gpt-35-turbo", CL100K),
    ("anthropic/claude-3-5-sonnet", CL100K),
    ("ollama/llama3", CL100K),
    ("", CL100K),
])
def test_encoding_is_chosen_by_model_family_behind_any_provider_prefix(model, encoding):
    assert encoding_for_model(model) == encoding
    assert tokenizer_for_model(model).encoding_name == encoding


def test_one_tokenizer_is_shared_per_encoding():
    assert tokenizer_for_model("gpt-4o") is tokenizer_for_model("openai/o3")
    assert tokenizer_for_model("gpt-4") is tokenizer_for_model("claude-3")
    assert tokenizer_for_model("gpt-4o") is not tokenizer_for_model("gpt-4")


@pytest.mark.parametrize("encoding, text, expected", [
    (CL100K, "hello world", 2),
    (O200K, "hello world", 2),
    (CL100K, "", 0),
    (CL100K, "你好，世界！今天天气很好。", 16),
    (O200K, "你好，世界！今天天气很好。", 9),
])
def test_count_matches_the_encoding(encoding, text, expected):
    assert tokenizer_for_encoding(encoding).count(text) == expected


def test_special_token_text_is_counted_as_plain_text(tokenizer):
    assert tokenizer.count("<|endoftext|>") > 1
    assert tokenizer.truncate("<|endoftext|> and more", 100) == "<|endoftext|> and more"


def test_truncate_returns_text_unchanged_when_it_fits(tokenizer):
    assert tokenizer.truncate("hello world", 2) == "hello world"
    assert tokenizer.truncate("", 0) == ""


def test_truncate_keeps_the_head_within_the_limit(tokenizer):
    text = "The quick brown fox jumps over the lazy dog. " * 20
    head = tokenizer.truncate(text, 10)
    assert text.startswith(head)
    assert tokenizer.count(head) <= 10
    assert len(head) > 20


def test_truncate_to_zero_tokens_is_empty(tokenizer):
    assert tokenizer.truncate("hello world", 0) == ""
    assert tokenizer.truncate("hello world", -3) == ""


@pytest.mark.parametrize("max_tokens", range(0, 40))
def test_truncate_never_splits_a_chinese_character(tokenizer, max_tokens):
    head = tokenizer.truncate(CHINESE, max_tokens)
    assert CHINESE.startswith(head)
    assert "\ufffd" not in head
    assert tokenizer.count(head) <= max_tokens


def test_truncate_of_chinese_grows_with_the_limit(tokenizer):
    lengths = [len(tokenizer.truncate(CHINESE, n)) for n in range(0, 40)]
    assert lengths == sorted(lengths)
    assert lengths[-1] == len(CHINESE)
    assert lengths[3] > 0


def test_truncate_never_splits_an_emoji(tokenizer):
    text = "ok 👍🏽👨‍👩‍👧 done"
    for n in range(tokenizer.count(text) + 1):
        head = tokenizer.truncate(text, n)
        assert text.startswith(head)
        assert tokenizer.count(head) <= n


def test_truncate_handles_lone_surrogates_as_a_prefix(tokenizer):
    text = "a\ud800b and more text"
    for n in range(tokenizer.count(text) + 1):
        head = tokenizer.truncate(text, n)
        assert text.startswith(head)
        assert tokenizer.count(head) <= n


def test_encodings_load_without_network(tmp_path):
    """A fresh interpreter, sockets disabled, no tiktoken cache of its own: the encodings come
    from the files gateway/_offline.py points at."""
    script = (
        "import socket\n"
        "def refuse(*a, **k):\n"
        "    raise OSError('network disabled in this test')\n"
        "socket.socket.connect = refuse\n"
        "socket.create_connection = refuse\n"
        "socket.getaddrinfo = refuse\n"
        "import gateway\n"
        "from gateway.tokenizer import tokenizer_for_model\n"
        "print(tokenizer_for_model('gpt-4o').count('hello world'),"
        " tokenizer_for_model('gpt-4').count('hello world'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TIKTOKEN_CACHE_DIR"}
    env["HOME"] = str(tmp_path)  # no user-level cache either
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env=env, cwd=pathlib.Path(__file__).parents[2],
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "2"]


def test_core_does_not_import_tiktoken():
    core = pathlib.Path(__file__).parents[2] / "gateway" / "core"
    importing = re.compile(r"^\s*(import|from)\s+tiktoken\b", re.MULTILINE)
    for path in core.glob("*.py"):
        assert not importing.search(path.read_text(encoding="utf-8")), path


# --- the caches ---------------------------------------------------------------------------------

def test_each_text_counted_is_kept_once():
    tokenizer = TiktokenTokenizer(CL100K)
    texts = ["hello world", CHINESE, "hello world", CHINESE, ""]
    assert [tokenizer.count(t) for t in texts] == [2, 36, 2, 36, 0]
    assert tokenizer.cached_texts == 3


def test_counts_and_truncations_do_not_depend_on_what_is_cached():
    """A tokenizer whose caches hold almost nothing (evicting all the time) answers exactly as
    one that never forgets."""
    tiny = TiktokenTokenizer(O200K, count_entries=4, count_chars=60, truncate_entries=2,
                             truncate_chars=80)
    roomy = tokenizer_for_encoding(O200K)
    texts = [CHINESE, "The quick brown fox. " * 5, "ok 👍🏽👨‍👩‍👧 done", "a\ud800b and more", "x"]
    for _ in range(3):
        for text in texts + texts[::-1]:
            assert tiny.count(text) == roomy.count(text) == len(
                roomy._encoding.encode_ordinary(text))
            for n in (0, 3, 7, 100):
                assert tiny.truncate(text, n) == roomy.truncate(text, n)
    assert tiny.cached_texts <= 4


def sized(key: str, value: int) -> int:
    return len(key)


def test_cache_never_holds_more_than_its_bounds():
    cache = BoundedCache(10, 100, sized)
    for i in range(1_000):
        cache.put(f"key{i}", i)
        assert len(cache) <= 10 and cache.size <= 100
    cache = BoundedCache(1_000, 50, sized)
    for i in range(1_000):
        cache.put("k" * (i % 20) + str(i), i)
        assert cache.size <= 50


def test_cache_answers_what_was_put_until_it_is_evicted():
    cache = BoundedCache(8, 1_000, sized)
    for i in range(100):
        cache.put(f"key{i}", i)
        assert cache.get(f"key{i}") == i
        assert all(cache.get(f"key{j}") in (j, None) for j in range(i))
    assert cache.get("never put") is None


def test_an_entry_used_in_every_generation_stays_and_unused_ones_go():
    cache = BoundedCache(8, 1_000, sized)
    cache.put("hot", -1)
    for i in range(100):
        cache.put(f"cold{i}", i)
        assert cache.get("hot") == -1
    assert cache.get("cold0") is None


def test_an_entry_larger_than_half_the_size_bound_is_not_kept():
    cache = BoundedCache(8, 20, sized)
    cache.put("x" * 11, 1)
    assert cache.get("x" * 11) is None and len(cache) == 0
    cache.put("x" * 10, 1)
    assert cache.get("x" * 10) == 1


def test_cache_keeps_its_bounds_and_answers_under_concurrent_use():
    cache = BoundedCache(64, 2_000, sized)
    errors = []

    def work(offset: int) -> None:
        for i in range(3_000):
            key = f"k{(i * 7 + offset) % 500}"
            found = cache.get(key)
            if found is not None and found != int(key[1:]):
                errors.append((key, found))
            cache.put(key, int(key[1:]))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(cache) <= 64 and cache.size <= 2_000
    assert cache.size == sum(len(k) for k in list(cache._current) + list(cache._previous))


@pytest.mark.parametrize("text", [
    "The harbour bicycle chain story, told again and again. " * 2_000,
    "我住在北京，今年三十五岁，是一名律师。" * 1_500,
    ";" * 200_000,
    "a" * 100_000,
    "12345 " * 20_000,
])
def test_a_long_text_is_cut_from_a_window_to_the_same_prefix_as_from_the_whole(text):
    tokenizer = tokenizer_for_encoding(CL100K)
    encoding = tiktoken.get_encoding(CL100K)
    whole = encoding.encode_ordinary(text)
    for n in (1, 7, 100, 500):
        prefix = tokenizer.truncate(text, n)
        assert text.startswith(prefix) and len(encoding.encode_ordinary(prefix)) <= n
        # What the whole text's first n tokens spell, as far as the prefix re-encodes within n.
        assert len(prefix) >= len(encoding.decode(whole[:max(0, n - 2)]))
