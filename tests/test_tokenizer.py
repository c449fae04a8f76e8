import os
import pathlib
import re
import subprocess
import sys

import pytest

from gateway.tokenizer import (
    CL100K,
    O200K,
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
                            env=env, cwd=os.path.dirname(os.path.dirname(__file__)),
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "2"]


def test_core_does_not_import_tiktoken():
    core = pathlib.Path(__file__).parent.parent / "gateway" / "core"
    importing = re.compile(r"^\s*(import|from)\s+tiktoken\b", re.MULTILINE)
    for path in core.glob("*.py"):
        assert not importing.search(path.read_text(encoding="utf-8")), path
