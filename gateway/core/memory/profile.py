"""A user's stable preferences (language, answer length, expertise, custom), learned from what
they write, and the short text the model sees of them.

Invariants:
- `update_profile` only reads user messages, never mutates its input, and changes a field only
  on evidence in the new messages (an explicit request, a self-statement, enough script);
- the newest evidence wins (a user who asks "be brief" after "详细一点" gets brief answers);
- `render_profile` of an empty profile is None (empty memory adds nothing to the request).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from gateway.core.memory.extraction import sentences, statements
from gateway.core.messages import Message, StoredMessage
from gateway.core.text.pii import redact

MAX_CUSTOM = 20
_MIN_LETTERS = 6
"""Fewer letters than this in the new messages say nothing about their language."""

LANGUAGE_NAMES = {"zh": "Chinese", "en": "English", "ja": "Japanese", "ko": "Korean",
                  "ru": "Russian", "ar": "Arabic", "el": "Greek", "he": "Hebrew", "th": "Thai"}


@dataclass(frozen=True, slots=True)
class Profile:
    language: str | None = None
    """ISO 639-1 code of the script the user writes in mostly ("zh", "en", ...)."""
    answer_length: str | None = None
    """"brief" or "detailed", from the user's explicit requests."""
    expertise: str | None = None
    """What the user says they are ("lawyer", "律师", "beginner"), in their words."""
    custom: tuple[tuple[str, str], ...] = ()
    """Other preferences as (key, value), one per key, at most MAX_CUSTOM (newest kept)."""

    @property
    def empty(self) -> bool:
        return not (self.language or self.answer_length or self.expertise or self.custom)

    def to_dict(self) -> dict[str, Any]:
        return {"language": self.language, "answer_length": self.answer_length,
                "expertise": self.expertise, "custom": [list(pair) for pair in self.custom]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Profile:
        def text(name: str) -> str | None:
            value = data.get(name)
            return str(value) if value else None

        custom = tuple((str(k), str(v)) for k, v in data.get("custom") or ())
        return cls(text("language"), text("answer_length"), text("expertise"), custom)


# Characters per script; a Han character carries about a word, so Latin-like scripts count
# letters / 4 against Han characters.
def _script_of(char: str) -> str | None:
    code = ord(char)
    if 0x4E00 <= code <= 0x9FFF or 0x3400 <= code <= 0x4DBF:
        return "zh"
    if 0x3040 <= code <= 0x30FF:
        return "ja"
    if 0xAC00 <= code <= 0xD7AF or 0x1100 <= code <= 0x11FF:
        return "ko"
    if not char.isalpha():
        return None
    name = unicodedata.name(char, "")
    for prefix, language in (("LATIN", "en"), ("CYRILLIC", "ru"), ("ARABIC", "ar"),
                             ("GREEK", "el"), ("HEBREW", "he"), ("THAI", "th")):
        if name.startswith(prefix):
            return language
    return None


def detect_language(text: str) -> str | None:
    """The script majority of `text` as a language code, or None without enough letters.
    Kana anywhere means Japanese (Japanese mixes Han and kana); Latin script is taken as
    English (telling Latin languages apart is beyond a script count)."""
    counts: dict[str, float] = {}
    letters = 0
    for char in text:
        script = _script_of(char)
        if script is None:
            continue
        letters += 1
        weight = 1.0 if script in ("zh", "ja", "ko") else 0.25
        counts[script] = counts.get(script, 0.0) + weight
    if letters < _MIN_LETTERS or not counts:
        return None
    if counts.get("ja") and counts.get("zh"):
        counts["ja"] += counts.pop("zh")
    return max(sorted(counts), key=lambda s: counts[s])


_BEGINNER = re.compile(r"(?i:\bi'm (?:a |an |)(?:complete |total )?(?:beginner|novice|newbie)"
                       r"|\bi am (?:a |an |)(?:complete |total )?(?:beginner|novice)"
                       r"|\bi'm new to|\bi am new to)|我是(?:个|一个)?(?:新手|小白|初学者)|我刚(?:开始)?学")
_CUSTOM = (
    (re.compile(r"(?i:\buse bullet points|\bin bullet points|\bas a list)|用列表|分点"), "format",
     "bullet points"),
    (re.compile(r"(?i:\bno emojis?|\bwithout emojis?|\bdon't use emojis?)|不要(?:用)?表情"), "emoji",
     "none"),
    (re.compile(r"(?i:\bwith code examples?|\bshow me (?:the )?code)|给(?:我)?(?:出)?代码示例"),
     "code_examples", "yes"),
)


def _user_texts(messages: Sequence[Message | StoredMessage]) -> list[str]:
    out = []
    for item in messages:
        message = item.message if isinstance(item, StoredMessage) else item
        if message.role == "user" and message.text.strip():
            out.append(redact(message.text))
    return out


def _with_custom(custom: tuple[tuple[str, str], ...], key: str,
                 value: str) -> tuple[tuple[str, str], ...]:
    kept = tuple((k, v) for k, v in custom if k != key)
    return (*kept, (key, value))[-MAX_CUSTOM:]


def update_profile(profile: Profile, messages: Sequence[Message | StoredMessage]) -> Profile:
    """`profile` updated with the evidence in the user messages among `messages`."""
    texts = _user_texts(messages)
    if not texts:
        return profile
    language = detect_language("\n".join(texts)) or profile.language
    answer_length, expertise, custom = profile.answer_length, profile.expertise, profile.custom
    for text in texts:
        for key, value, _ in statements(text):
            if key == "preferred_answer_length":
                answer_length = "brief" if value in ("brief", "简短") else "detailed"
            elif key == "user_job":
                expertise = value
            elif key == "preferred_language":
                custom = _with_custom(custom, "reply_language", value)
        for sentence in sentences(text):
            if _BEGINNER.search(sentence):
                expertise = "beginner" if detect_language(sentence) != "zh" else "新手"
            for pattern, key, value in _CUSTOM:
                if pattern.search(sentence):
                    custom = _with_custom(custom, key, value)
    return replace(profile, language=language, answer_length=answer_length,
                   expertise=expertise, custom=custom)


def render_profile(profile: Profile) -> str | None:
    """A few short lines for the model, or None when nothing worth a block is known: the
    language alone is not (the model reads it from the message it answers)."""
    if profile.empty or not (profile.answer_length or profile.expertise or profile.custom):
        return None
    lines = []
    if profile.language:
        lines.append(f"Writes in: {LANGUAGE_NAMES.get(profile.language, profile.language)}")
    if profile.answer_length:
        lines.append(f"Preferred answer length: {profile.answer_length}")
    if profile.expertise:
        lines.append(f"Expertise: {profile.expertise}")
    lines += [f"{key.replace('_', ' ').capitalize()}: {value}" for key, value in profile.custom]
    return "\n".join(lines)
