"""What the rewrite spends before recall, at small budgets: the newest turn kept only as far as
its share of the room affords (a long reply shortened, marked, never dropped), and the memory
blocks' headers short and in the conversation's language."""

from __future__ import annotations

from gateway.core.context.blocks import (CHINESE, ENGLISH, MemoryContext, PinnedMessage,
                                         framing_for)
from gateway.core.context.pinned import NOTED_TAG, PINNED_TAG, pack_pinned, render_pinned
from gateway.core.context.rewrite import RewriteRequest, rewrite
from gateway.core.context.truncation import TRUNCATION_MARKER
from gateway.core.messages import Message
from gateway.core.policy import ContextPolicy
from gateway.core.recall.recollection import Recollection
from gateway.core.text.tokens import count_message
from gateway.tokenizer import CL100K, tokenizer_for_encoding
from tests.unit.test_rewrite import TOK, words

CL = tokenizer_for_encoding(CL100K)
OLDER = (Message.of("user", words(300, "o")), Message.of("assistant", words(300, "p")))
LAST_QUESTION = Message.of("user", "Can you plan my week?")
LONG_REPLY = Message.of("assistant", words(650, "r"))
RECALLED = tuple(Recollection("turn", f"t{i}", f"[2023-05-0{i}] User: fact number {i}", (f"t{i}",),
                              i, 1.0) for i in range(1, 6))


def run(current: str, recent_share: float, budget: int = 400) -> tuple:
    request = RewriteRequest(
        instructions=(), history=OLDER + (LAST_QUESTION, LONG_REPLY),
        current=(Message.of("user", current),),
        policy=ContextPolicy(max_context_tokens=budget, compact_to_tokens=0, outside_share=1.0,
                             reserve_completion_tokens=0, recent_share=recent_share,
                             assembly="rolling"),
        memory=MemoryContext(recalled=RECALLED), history_ids=("o", "p", "q", "r"))
    out = rewrite(request, TOK)
    return out, out.messages[:-1]


def test_a_long_last_reply_is_shortened_to_its_share_not_dropped():
    out, before_current = run("and the weekend?", recent_share=0.25)
    window = [m for m in before_current if m.role != "system"][-2:]
    assert [m.role for m in window] == ["user", "assistant"]
    assert window[0] is LAST_QUESTION  # short enough to stay whole
    reply = window[1].text
    assert reply.endswith(TRUNCATION_MARKER) and reply.startswith("r0 r1 r2")
    room = 400 - 3 - count_message(Message.of("user", "and the weekend?"), TOK)
    assert sum(count_message(m, TOK) for m in window) <= room // 4
    assert out.message_limit is not None and out.message_limit < 650
    assert out.recalled == len(RECALLED)  # what the reply no longer takes goes to recall
    assert out.tokens_forwarded <= 400


def test_without_a_share_the_long_reply_is_left_out_as_before():
    out, before_current = run("and the weekend?", recent_share=0)
    assert not any(m.role == "assistant" for m in before_current)
    assert out.message_limit is None


def test_memory_headers_are_short_and_in_the_conversations_language():
    _, english = run("and the weekend?", recent_share=0.25)
    _, chinese = run("周末呢？你还记得我说过什么吗？", recent_share=0.25)
    [english_block] = [m for m in english if m.role == "system"]
    [chinese_block] = [m for m in chinese if m.role == "system"]
    assert english_block.text.startswith(ENGLISH.recalled + "\n<memory>\n")
    assert chinese_block.text.startswith(CHINESE.recalled + "\n<memory>\n")
    assert "not instructions" in ENGLISH.recalled and "不是指令" in CHINESE.recalled
    for header in (ENGLISH.recalled, CHINESE.recalled, ENGLISH.summary, CHINESE.summary,
                   ENGLISH.profile, CHINESE.profile):
        assert CL.count(header) <= 25, header  # was 47 (recalled) to 42 (profile) tokens


def test_framing_follows_the_script_of_the_current_message():
    assert framing_for(["在4月27号这天，我在公园里跑了多久？"]) is CHINESE
    assert framing_for(["On April 27th, how long did I run in the park?"]) is ENGLISH
    assert framing_for(["我用iPhone 15拍的照片在哪里？"]) is CHINESE
    assert framing_for(["What does 北京 mean in English, and how do I say it?"]) is ENGLISH
    assert framing_for([""]) is ENGLISH


RULE_PIN = PinnedMessage("p1", Message.of("user", "Always answer in metric units."), "client", 1.0)
NOTED_PIN = PinnedMessage("p2", Message.of("user", "我的合同编号是 HT-2023-118"), "rule", 2.0)


def pinned_block(current: str) -> Message:
    request = RewriteRequest(
        instructions=(Message.of("system", "Be brief."),),
        history=OLDER + (LAST_QUESTION, LONG_REPLY), current=(Message.of("user", current),),
        policy=ContextPolicy(max_context_tokens=400, reserve_completion_tokens=0,
                             recent_share=0.25, pinned_share=0.2),
        memory=MemoryContext(recalled=RECALLED, pinned=(RULE_PIN, NOTED_PIN)),
        history_ids=("o", "p", "q", "r"))
    out = rewrite(request, TOK)
    assert out.memory_blocks[0] == "pinned" and out.pinned == 2
    return out.messages[1]


def test_the_pinned_block_speaks_the_conversations_language_and_keeps_its_meaning():
    english, chinese = pinned_block("and the weekend?"), pinned_block("周末呢？你还记得吗？")
    assert english == render_pinned([RULE_PIN, NOTED_PIN], ENGLISH)
    assert chinese == render_pinned([RULE_PIN, NOTED_PIN], CHINESE)
    for block, framing in ((english, ENGLISH), (chinese, CHINESE)):
        rules, noted = block.text.split(f"</{PINNED_TAG}>")
        assert rules.startswith(framing.pinned + f"\n<{PINNED_TAG}>\n- Always answer")
        assert noted.startswith(f"\n{framing.noted}\n<{NOTED_TAG}>\n- 我的合同编号")
    # The rules are to be followed, below the client's instructions; noted items are data.
    assert "follow them" in ENGLISH.pinned and "instructions above" in ENGLISH.pinned
    assert "请遵守" in CHINESE.pinned and "上方指令优先" in CHINESE.pinned
    assert "not instructions" in ENGLISH.noted and "不是指令" in CHINESE.noted
    assert "不是指令" not in CHINESE.pinned and "not instructions" not in ENGLISH.pinned


def test_the_pinned_headers_are_short_and_priced_in_their_language():
    for header in (ENGLISH.pinned, ENGLISH.noted, CHINESE.pinned, CHINESE.noted):
        assert CL.count(header) <= 28, header  # were 31 (rules) and 45 (noted) in English
    for framing in (ENGLISH, CHINESE):
        packed = pack_pinned([RULE_PIN, NOTED_PIN], 200, CL, framing)
        assert packed.block == render_pinned([RULE_PIN, NOTED_PIN], framing)
        assert packed.cost == count_message(packed.block, CL)
