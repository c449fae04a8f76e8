"""The user profile (gateway.core.memory.profile): learned from user messages, rendered briefly."""

from __future__ import annotations

from gateway.core.messages import Message, chain
from gateway.core.memory.profile import Profile, detect_language, render_profile, update_profile


def users(*texts: str) -> list[Message]:
    return [Message.of("user", t) for t in texts]


def test_language_follows_the_script_majority():
    assert detect_language("请帮我看一下这份合同 contract") == "zh"
    assert detect_language("Please review this contract, 谢谢") == "en"
    assert detect_language("これは契約書です") == "ja"
    assert detect_language("ok 1 2") is None  # too little to tell


def test_explicit_requests_set_answer_length_and_the_newest_wins():
    p = update_profile(Profile(), users("Please be brief."))
    assert p.answer_length == "brief"
    assert update_profile(p, users("这个问题请详细一点说明")).answer_length == "detailed"
    assert update_profile(p, users("I signed a detailed contract")).answer_length == "brief"


def test_expertise_comes_from_self_statements():
    assert update_profile(Profile(), users("I'm a developer.")).expertise == "developer"
    assert update_profile(Profile(), users("我是一名律师。")).expertise == "律师"
    assert update_profile(Profile(), users("I'm new to Python")).expertise == "beginner"


def test_custom_preferences_are_kept_by_key():
    p = update_profile(Profile(), users("请用中文回答，用列表"))
    assert dict(p.custom) == {"reply_language": "中文", "format": "bullet points"}
    p = update_profile(p, users("Answer in English please"))
    assert dict(p.custom)["reply_language"] == "English"


def test_only_user_messages_count_and_inputs_are_not_mutated():
    messages = chain(None, [Message.of("assistant", "I'm a lawyer. Be brief."),
                            Message.of("user", "帮我看看这份租赁合同")])
    before = Profile(answer_length="detailed")
    after = update_profile(before, messages)
    assert after == Profile(language="zh", answer_length="detailed")
    assert before == Profile(answer_length="detailed")


def test_render_is_short_text_or_none_when_empty():
    assert render_profile(Profile()) is None
    text = render_profile(Profile("zh", "brief", "律师", (("reply_language", "中文"),)))
    assert text == ("Writes in: Chinese\nPreferred answer length: brief\nExpertise: 律师\n"
                    "Reply language: 中文")


def test_profile_round_trips_as_a_dict():
    p = Profile("en", "brief", "lawyer", (("format", "bullet points"),))
    assert Profile.from_dict(p.to_dict()) == p


def test_a_profile_knowing_only_the_language_adds_no_block():
    assert render_profile(Profile(language="en")) is None
    assert render_profile(Profile(language="zh", answer_length="brief")) is not None
