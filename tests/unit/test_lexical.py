"""Tokens for lexical search: words, CJK bigrams or dictionary words, stems."""

import pytest

from gateway.core.text.lexical import tokens
from gateway.memory.search.bm25 import Bm25
from gateway.memory.search.lexical_index import terms
from gateway.memory.search.segmentation import words
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


# Chinese cut into dictionary words (gateway/memory/search/segmentation.py), as the gateway's
# lexical index does by default.

def test_segmented_chinese_keeps_words_not_straddling_bigrams():
    assert words("我住在北京") == ["我", "住", "在", "北京"]
    assert tokens("我住在北京", segment=words) == ["住", "北京"]  # 我, 在: function words
    assert "在北" not in tokens("我住在北京", segment=words)
    assert tokens("iPhone 15在北京", segment=words) == ["iphone", "15", "北京"]


def test_segmented_words_concatenate_to_the_run():
    run = "我曾经和你提到我去过绿禾公园看到了一朵开得特别美的樱花"
    assert "".join(words(run)) == run
    assert {"绿禾", "公园", "樱花"} <= set(words(run))


def test_segmented_question_words_are_not_topics():
    question = tokens("李娜的妈妈什么时候做膝盖手术？", segment=words)
    assert {"李娜", "妈妈", "膝盖", "手术"} <= set(question)
    assert not {"什么", "时候", "什么时候"} & set(question)
    assert tokens("婚礼定在什么时候？你们哪里见？", segment=words) == ["婚礼", "定", "见"]


def test_segmented_terms_match_the_answer_not_unrelated_turns():
    """Bigrams such as 我去 / 去了 tie a question to every turn that says them; words do not."""
    turns = ["好主意！还有其他建议吗？", "周末我去了绿禾公园，看到一朵开得特别美的樱花。",
             "你在公园里看到了什么有意思的东西吗？", "今天天气很好，我想出去走走。"]
    query = "周末我去了哪里？"

    def scores(segment):
        index = Bm25()
        for turn in turns:
            index.add(terms(turn, segment=segment))
        return [float(s) for s in index.scores(terms(query, segment=segment))]

    by_words, by_bigrams = scores(words), scores(None)
    assert by_words[1] > 0 and [s for i, s in enumerate(by_words) if i != 1] == [0, 0, 0]
    assert sum(1 for s in by_bigrams if s > 0) > 1  # what segmentation fixes
