"""Recalled pages go after the shorter items unless the message asks what the assistant said
(gateway/core/recall/pages.py), and the rewrite packs them in that order."""

from __future__ import annotations

import pytest

from gateway.core.context.blocks import MemoryContext
from gateway.core.context.packing import pack_recalled, recalled_lines
from gateway.core.context.rewrite import RewriteRequest, rewrite
from gateway.core.messages import Message
from gateway.core.policy import ContextPolicy
from gateway.core.recall.need import asks_what_you_said
from gateway.core.recall.pages import PAGE_CHARS, pages_last
from gateway.core.recall.recollection import Recollection
from gateway.core.text.tokens import count_messages
from tests.unit.test_rewrite import WordTokenizer

PAGE = "Assistant: " + "here is a long answer with many steps. " * (PAGE_CHARS // 30)
SHORT = ("User: I prefer hiking trails with a lake at the end.",
         "User: My camera is a Sony with a 24-70 lens.",
         "User: I wind down by half past nine every evening.")


def items() -> tuple[Recollection, ...]:
    texts = (PAGE,) + SHORT
    return tuple(Recollection("turn", f"t{i}", text, (f"t{i}",), i, 1.0 - i / 10)
                 for i, text in enumerate(texts))


@pytest.mark.parametrize("message", [
    "In our previous chat, you suggested a few names for the band. What was the third?",
    "You recommended five bottles for the bar; which ones were they?",
    "Could you remind me of that restaurant in the old town?",
    "What did you recommend for my evenings?",
    "What was your answer about the chord progression?",
    "I\u2019m back: you\u2019d mentioned a trail near the lake, which one?",
    "你之前推荐的那本书叫什么？",
    "你上次说的那个餐厅在哪里？",
    "You once taught me a recipe for ribs. What was it?",
    "What advice have you given me about living a healthy life?",
    "What methods have you told me about for relieving stress?",
    "关于如何放松，你给了我什么建议？",
    "你曾经和我推荐过几个厨艺节目，他们的名字是？",
    "你告诉过我哪些缓解压力的方法？",
])
def test_a_message_asking_what_the_assistant_said_is_told_apart(message):
    assert asks_what_you_said(message)


@pytest.mark.parametrize("message", [
    "Can you suggest some activities for the evening?",
    "What is the name of the playlist I created on Spotify?",
    "How many doctor's appointments did I go to in March?",
    "I told you about my trip; what should I pack?",
    "你能推荐几本书吗？",
    "我上周去了哪里？",
    "Could you remind me what my flight number was?",
    "What did I tell you I recommended to Ana?",
    "我曾经和你推荐过一部科幻电影，它的名字是？",  # 你 is the object: the user recommended it
    "在5月6号，我给你推荐了一些书目，是哪些书？",
])
def test_a_message_about_the_user_or_the_world_is_not(message):
    assert not asks_what_you_said(message)


def test_pages_go_after_the_shorter_items_in_rank_order():
    ordered = pages_last(items(), "Any ideas for my evenings?")
    assert [r.id for r in ordered] == ["t1", "t2", "t3", "t0"]
    assert sorted(ordered, key=lambda r: r.id) == sorted(items(), key=lambda r: r.id)


def test_the_ranking_order_is_kept_when_the_assistants_words_are_asked_for_or_no_page():
    recalled = items()
    assert pages_last(recalled, "Remind me what you recommended?") is recalled
    short = recalled[1:]
    assert pages_last(short, "Any ideas for my evenings?") is short


def test_the_rewrite_packs_short_items_before_a_page_ranked_above_them():
    tok = WordTokenizer()
    page_alone = pack_recalled(recalled_lines(items()[:1], tok), 10**9, tok).cost

    def forwarded(question: str) -> tuple[str, ...]:
        current = (Message.of("user", question),)
        # Room for the page alone, or for the short items: not for both.
        budget = count_messages(current, tok) + page_alone + 5
        request = RewriteRequest(
            instructions=(), history=(), current=current,
            policy=ContextPolicy(max_context_tokens=budget, compact_to_tokens=0,
                                 reserve_completion_tokens=0),
            memory=MemoryContext(recalled=items()))
        return rewrite(request, tok).recalled_ids

    assert forwarded("Any ideas for my evenings?") == ("t1", "t2", "t3")
    assert forwarded("What did you recommend for my evenings?") == ("t0",)
