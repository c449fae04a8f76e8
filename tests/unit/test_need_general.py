"""General requests to an assistant need no memory of the user's past: whatever their person or
tense, they stay `OPEN` (gateway/core/recall/need.py). Written as an assistant's users ask, not
taken from any benchmark: coding, cooking, trivia, writing, advice, Chinese."""

from __future__ import annotations

import pytest

from gateway.core.recall.need import Need, memory_need

GENERAL_REQUESTS = [
    # coding
    "How do I reverse a list in Python?", "Can you fix this code? It throws a KeyError.",
    "Why does my function return None?", "How can I make my website load faster?",
    "What is the difference between a process and a thread?",
    "Write a SQL query that counts orders per customer.",
    "I need a regex that matches an email address.", "Can I use async with Flask?",
    "Am I allowed to use GPL code in a commercial product?",
    "Should I learn Rust or Go first?", "Explain how a hash map works.",
    "I'm getting a segmentation fault in C, what could cause it?",
    "How do I undo the last git commit?", "What does this error mean: ModuleNotFoundError?",
    # cooking
    "How do I boil an egg?", "How long should I boil an egg?",
    "I need a recipe for banana bread.", "What can I cook with chickpeas and spinach?",
    "Can I freeze cooked rice?", "What temperature should I roast a chicken at?",
    "Is it safe to eat raw cookie dough?", "How do I make my bread rise more?",
    "What wine goes with salmon?", "Give me a quick vegan dinner idea.",
    # trivia and facts
    "What is the capital of France?", "Who wrote Pride and Prejudice?",
    "How far is the Moon from the Earth?", "What is 17 times 23?",
    "Why is the sky blue?", "How many bones are in the human body?",
    "What causes earthquakes?", "Which planet is the largest?",
    "What is the boiling point of water at high altitude?", "Who painted the Mona Lisa?",
    "When did World War II end?", "When was Lincoln born?", "When was the Eiffel Tower built?",
    "How was Paris founded?", "What year was Python released?",
    # writing
    "Write me a poem about autumn.", "Can you write a four-line poem about the sea?",
    "Help me write a cover letter for a data analyst job.",
    "Can you proofread this paragraph for me?", "Translate 'good luck' into Spanish.",
    "Summarise this article in three sentences.", "Give me five names for a coffee shop.",
    "Make this email sound more polite.",
    # advice, health, money, travel
    "I want to start running, how should I train for a 5k?",
    "What should I pack for a week in Iceland?", "How can I sleep better?",
    "Do I need a visa to visit Japan?", "How much should I save for retirement?",
    "I feel stressed at work, any tips?", "What is a good stretching routine for my back?",
    "How do I get red wine out of my carpet?", "Can I take ibuprofen with coffee?",
    "What should I do if I burned my hand on the stove?",
    "What would happen if I mixed bleach and vinegar?",
    # Chinese
    "如何用Python读取文件？", "鸡蛋应该煮多久？", "法国的首都是哪里？", "帮我写一首关于春天的诗。",
    "我想学做红烧肉，怎么做？", "我该怎么提高睡眠质量？", "我饿了，吃什么好？", "我明天过生日，有什么好玩的？",
    "你能帮我翻译这段话吗？",
]


@pytest.mark.parametrize("message", GENERAL_REQUESTS)
def test_a_general_request_is_open(message):
    assert memory_need(message) is Need.OPEN
