"""Tokens for lexical search."""

import pytest

from gateway.core.text.lexical import tokens
from gateway.memory.search.stemming import stemmed


@pytest.mark.parametrize("text, expected", [
    ("What is my locker number?", ["locker", "number"]),
    ("Locker 4417, Caroline's", ["locker", "4417", "caroline"]),
    ("我住在北京", ["住", "北", "京", "我住", "住在", "在北", "北京"]),
    ("北京", ["北", "京", "北京"]),
    ("iPhone 15在北京", ["iphone", "15", "北", "京", "在北", "北京"]),
    ("ＡＢＣ１２３", ["abc123"]),
    ("", []),
    ("  ...  ", []),
])
def test_tokens(text, expected):
    assert tokens(text) == expected


def test_stopwords_are_optional():
    assert tokens("What is it", stopwords=frozenset()) == ["what", "is", "it"]


def test_a_chinese_query_shares_bigrams_with_its_answer():
    assert "北京" in set(tokens("我住在北京")) & set(tokens("你住在哪里？北京吗"))


def test_english_word_forms_meet_at_their_stem():
    def stems(text: str) -> list[str]:
        return stemmed(tokens(text))
    assert stems("researching adoption agencies") == stems("research adoption agency")
    assert set(stems("Where has Melanie camped?")) & set(stems("we went camping"))
    assert stems("Locker 4417, 2023") == ["locker", "4417", "2023"]


def test_stemming_leaves_other_scripts_alone():
    assert stemmed(tokens("Gespräche über Bücher 我住在北京")) == tokens(
        "Gespräche über Bücher 我住在北京")


def test_chinese_question_words_are_not_topics():
    question = set(tokens("李娜的妈妈什么时候做膝盖手术？"))
    assert {"膝盖", "手术", "妈妈"} <= question
    assert not question & set(tokens("婚礼定在什么时候？你们哪里见？"))
