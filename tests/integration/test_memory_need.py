"""A message that needs no memory recalls nothing, and one about what was said before is not
stopped by the relevance gate (gateway/core/recall/need.py), end to end: the real app over
HTTP, the real openai SDK, a real store, inline recording; the `fake/echo-messages` upstream
answers with the messages it received."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.integration.test_user_memory import CAT, say, seen
from tests.support.gateway import gateway_config, running_gateway

THANKS = "Thanks so much, have a nice day!"


def memory(gate: float) -> dict:
    """No floor; `gate`: the relevance gate (-1: none)."""
    return {"memory": {"recall_relevance_floor": -1, "recall_relevance_gate": gate}}


@pytest.fixture
def ungated(redis_url: str) -> Iterator[str]:
    with running_gateway(gateway_config(redis_url, tenant=memory(-1))) as url:
        yield url


@pytest.fixture
def gated(redis_url: str) -> Iterator[str]:
    # A gate no stored turn reaches: only a message about the past gets past it.
    with running_gateway(gateway_config(redis_url, tenant=memory(0.999))) as url:
        yield url


def test_pleasantries_recall_nothing_even_when_stored_pleasantries_match_them(ungated):
    say(ungated, CAT, "a", "ursula")
    say(ungated, THANKS, "a", "ursula")

    assert THANKS not in seen(ungated, "Thanks so much!", "b", "ursula")
    assert "Quixote" not in seen(ungated, "Good morning, Ursula! How are you today?", "c",
                                 "ursula")
    # The same words in a message that asks something: recalled as before.
    assert THANKS in seen(ungated, "Thanks so much for what, again?", "e", "ursula")


def test_a_question_about_what_was_said_before_passes_the_gate(gated):
    say(gated, CAT, "a", "ursula")

    assert "Quixote" not in seen(gated, "How often should I feed my cat?", "b", "ursula")
    assert "Quixote" in seen(gated, "Do you remember what my cat is called?", "c", "ursula")
    assert "Quixote" in seen(gated, "What is my cat called?", "e", "ursula")
    assert "Quixote" in seen(gated, "你还记得我的猫叫什么吗？ my cat", "d", "ursula")
