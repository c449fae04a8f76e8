"""What form a question takes, from its words alone: whether it asks for an inference.

An inference question asks what is likely, possible or would be true ("Would Ana likely
enjoy Vivaldi?", "What might John's degree be in?", "她可能喜欢什么？") rather than what was
said. Its answer is assembled from hints scattered across a conversation — what a person
said about themselves here and there — so it may want recall tuned for breadth rather than
adjacency. The rule is what the words say, not a classifier: a modal or hedging word of the
question's language. On the LoCoMo dev split it marks 22 of the 32 open-domain questions and
1 of the other 725. Recalling those differently (fewer successors, less BM25, the named
person's turns first) was simulated and did not hold out in leave-one-conversation-out, so
the gateway does not use it: it lives here, beside the simulation that does
(bench/locomo/simulate.py; bench/README.md, "Open-domain (category 3)").

Invariants: pure; case-insensitive; whole words for languages written with spaces (so
"mighty" is no hedge), substrings for Chinese and Japanese (written without spaces); the
month "May" is never a hedge (only the lower-case modal "may" is).
"""

from __future__ import annotations

import re

# Modal verbs and hedging adverbs/adjectives: what makes a question hypothetical.
_WORDS = (
    # English
    "would", "wouldn't", "might", "could", "likely", "unlikely", "probably", "possibly",
    "perhaps", "presumably", "considered",
    # French, Spanish, Portuguese, Italian, German (the embedder's other common languages)
    "probablement", "peut-être", "probablemente", "quizás", "quizá", "posiblemente",
    "provavelmente", "talvez", "probabilmente", "forse", "wahrscheinlich", "vielleicht",
    "würde", "könnte",
)
_SPACED = re.compile(r"(?<![\w'-])(?:" + "|".join(re.escape(w) for w in _WORDS) + r")(?![\w'-])",
                     re.IGNORECASE)
# "may" as a modal: lower case only, so the month ("in May 2023") never counts.
_MAY = re.compile(r"(?<![\w'-])may(?![\w'-])")
# Chinese (simplified and traditional) and Japanese: no word boundaries to rely on.
_UNSPACED = ("可能", "会不会", "會不會", "是否会", "是否會", "大概", "也许", "也許", "或许",
             "或許", "应该会", "應該會", "估计", "估計", "だろう", "でしょう", "かもしれ")


def asks_inference(question: str) -> bool:
    """Whether `question` asks for an inference (what would, might or is likely to be true)
    rather than for something stated: it holds a modal or hedging word."""
    if _SPACED.search(question) or _MAY.search(question):
        return True
    return any(w in question for w in _UNSPACED)
