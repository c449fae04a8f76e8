"""Whether a question asks for an inference (bench/locomo/question_form.py): a modal or
hedging word of its language, in English, Chinese and the embedder's other common languages;
never the month "May" or a word that merely contains a hedge."""

import pytest

from bench.locomo.question_form import asks_inference


@pytest.mark.parametrize("question", [
    "Would Ana likely enjoy a concert by the lake?",
    "What might Tom's degree be in?",
    "Is it likely that Ana has friends besides Tom?",
    "Would Tom be considered a patriotic person?",
    "What pets wouldn't cause any discomfort to Ana?",
    "What fields could she probably pursue?",
    "Where may Tom move next year?",
    "WOULD ANA GO CAMPING AGAIN?",
    "王磊可能喜欢什么样的音乐？",
    "陈静会不会再去大理旅行？",
    "陳靜會不會再去大理旅行？",
    "李娜是否会开第二家店？",
    "张伟大概是做什么工作的？",
    "赵敏也许会搬到日本吗？",
    "Ana aimerait-elle probablement Vivaldi ?",
    "¿Quizás Ana prefiera el campo?",
    "Würde Tom gern am Meer wohnen?",
    "彼は海の近くに住んでいるでしょう？",
])
def test_a_question_with_a_modal_or_hedge_asks_for_an_inference(question):
    assert asks_inference(question)


@pytest.mark.parametrize("question", [
    "What did Ana paint last week?",
    "When did Tom go to the beach?",
    "What movie did Ana watch on 1 May, 2022?",
    "May I ask where Tom lives?",  # the month rule: a capitalised "May" is never a hedge
    "Who won the Mighty Ducks game?",
    "Which couldron did Ana buy?",
    "王磊的女儿叫什么名字？",
    "李娜是否去过深圳？",  # "whether" alone asks about a fact
    "陈静打算什么时候出发去大理？",
    "",
])
def test_a_question_about_what_was_said_does_not(question):
    assert not asks_inference(question)
