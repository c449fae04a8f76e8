"""Questions about the past of the people in the conversation are `PAST` by their grammar
(gateway/core/recall/personal.py, through gateway/core/recall/need.py); a present request, a
modal, a conditional or a statement of one's past before a present request is not."""

from __future__ import annotations

import pytest

from gateway.core.recall.need import Need, memory_need
from gateway.core.recall.personal import asks_own_past

OWN_PAST = [
    # a past auxiliary with a first- or second-person subject
    "How many concerts did I go to this spring?", "Have I ever told you about my brother?",
    "Was I the one who picked the restaurant?", "Where did my parents stay in Lisbon?",
    "Which book did you suggest for my flight?", "Didn't we pick a name for the boat?",
    # issue 38's two LongMemEval questions the gate had let through with no recall
    "What is the name of the playlist I created on Spotify?",
    "How many doctor's appointments did I go to in March?",
    # a first-person past verb in the question's own clause
    "What is the title of the song I wrote for my sister?",
    "Which of the hotels we've stayed at had a pool?", "Tell me the cake I baked for Sam.",
    "What was that museum you recommended in Vienna?",
    # a fact about the user
    "What is my cat called?", "What's my daughter's teacher's name?",
    "What colour is my bike?", "Which bank was my first account with?",
    # once / before as past markers, anywhere
    "I once showed you a photo of a lighthouse, where was it?",
    "You suggested a podcast before, which one?",
    # a person's past, named
    "When did Dana start her pottery class?", "What did Priya paint for the fair?",
    "How long has Omar had his bakery?", "When was Lena in Oslo?",
    "What was Tom's first car?", "Which race was it that Mia won?",
    # Chinese: 曾, 过, 了 with a question word
    "我曾经跟你说过我的狗叫什么吗？", "我去过哪些城市？", "我给妈妈买了什么礼物？", "我们看过这部电影吗？",
]
PRESENT_OR_BACKGROUND = [
    "I tried pip install but it failed, what should I do?",
    "I moved to Berlin. Where can I find a good bakery?",
    "Am I allowed to park here on Sundays?", "What would happen if I mixed baking soda and milk?",
    "Should I need a visa, how long does it take?", "Do I need to feed a sourdough starter daily?",
    "How do I get used to waking up early?", "I've got a question about taxes. Any advice?",
    "I've never cooked lamb before. How long should I roast it?",
    "Have you heard of the Fibonacci sequence?", "What would you recommend for a cold?",
    "When did World War II end?", "What happened to the Roman Empire?",
    "What do you think is my best option here?", "What is a good lamp for my desk?",
    "我饿了，吃什么好？", "我明天过生日，有什么好玩的？", "我该怎么学做饭？",
]


@pytest.mark.parametrize("message", OWN_PAST)
def test_a_question_about_a_persons_past_is_past(message):
    assert asks_own_past(message)
    assert memory_need(message) is Need.PAST


@pytest.mark.parametrize("message", PRESENT_OR_BACKGROUND)
def test_a_present_request_or_a_past_told_as_background_is_open(message):
    assert not asks_own_past(message)
    assert memory_need(message) is Need.OPEN


def test_only_the_question_sentence_counts():
    assert not asks_own_past("I baked a cake for Sam.")
    assert asks_own_past("What did I bake for Sam?")
    assert not asks_own_past("What should I bake for Sam?")


def test_a_name_is_capitalised_as_written():
    assert asks_own_past("What did Caroline research?")
    assert not asks_own_past("what did caroline research?")


def test_a_past_question_beyond_the_read_tail_is_not_seen():
    question = "What did I bake for Sam? "
    assert memory_need(question + "x " * 400 + "How do I boil an egg?") is Need.OPEN
    assert memory_need("x " * 400 + question) is Need.PAST
