"""A history's token costs kept by chained id (gateway/pipeline/history_costs.py), and what makes
that
sound: `count_message` is a function of what a message says (its canonical form)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.context.blocks import MemoryContext
from gateway.core.messages import Message, chain, chain_id
from gateway.core.policy import ContextPolicy
from gateway.core.recall.recollection import Recollection
from gateway.core.context.rewrite import RewriteRequest, rewrite
from gateway.core.text.tokens import count_each, count_message
from gateway.pipeline.history_costs import HistoryCosts
from gateway.tokenizer import tokenizer_for_encoding

O200K = tokenizer_for_encoding("o200k_base")
CL100K = tokenizer_for_encoding("cl100k_base")


def turn(n: int) -> list[Message]:
    return [Message.of("user", f"Question {n}: how long do the trains to Porto take?"),
            Message.of("assistant", f"Answer {n}: about three hours from Lisbon.",
                       refusal=None, annotations=[])]


def ids_of(messages: list[Message]) -> tuple[str, ...]:
    return tuple(s.id for s in chain(None, messages))


def test_a_growing_history_counts_only_what_follows_the_last_request() -> None:
    memo = HistoryCosts()
    history: list[Message] = []
    for n in range(6):  # a stateless client: each request resends the history, two longer
        history += turn(n)
        costs = memo.costs(history, ids_of(history), O200K)
        assert costs == count_each(history, O200K)
        assert memo.counted == len(history)  # every message counted once, ever
    # The same history again (another question): nothing counted.
    assert memo.costs(history, ids_of(history), O200K) == count_each(history, O200K)
    assert memo.counted == len(history)


def test_an_edited_message_is_counted_again_from_the_edit_on() -> None:
    memo = HistoryCosts()
    history = turn(0) + turn(1) + turn(2)
    memo.costs(history, ids_of(history), O200K)
    edited = history[:2] + [Message.of("user", "A much longer question about night trains, "
                                               "sleeper cabins and the border at Vigo?")] \
        + history[3:]
    counted = memo.counted
    assert memo.costs(edited, ids_of(edited), O200K) == count_each(edited, O200K)
    assert memo.counted > counted  # nothing past the edit came from the held prefix


def test_costs_are_kept_per_tokenizer_and_unknown_ids_are_counted() -> None:
    memo = HistoryCosts()
    history = turn(0) + turn(1)
    assert memo.costs(history, ids_of(history), O200K) == count_each(history, O200K)
    assert memo.costs(history, ids_of(history), CL100K) == count_each(history, CL100K)
    unknown = (None,) * len(history)
    counted = memo.counted
    assert memo.costs(history, unknown, O200K) == count_each(history, O200K)
    assert memo.counted == counted + len(history)
    with pytest.raises(ValueError):
        memo.costs(history, ids_of(history)[:-1], O200K)


absent = st.sampled_from([None, [], ()])


@given(role=st.sampled_from(["user", "assistant"]), text=st.text(max_size=60),
       nulls=st.dictionaries(st.sampled_from(["refusal", "annotations", "audio", "name"]),
                             absent, max_size=3),
       calls=st.dictionaries(st.sampled_from(["id", "type", "function"]),
                             st.text(max_size=8), min_size=1, max_size=3))
def test_messages_with_one_chained_id_cost_the_same(role, text, nulls, calls) -> None:
    # What a client resends as the SDK returned it (`"refusal": null`, `"annotations": []`)
    # and the same message without those fields, or with its fields in another order, are
    # one message: one id, so one cost.
    plain = Message.of(role, text, tool_calls=[calls])
    resent = Message.of(role, text, **nulls, tool_calls=[dict(reversed(list(calls.items())))])
    assert chain_id(None, plain) == chain_id(None, resent)
    for tokenizer in (O200K, CL100K):
        assert count_message(plain, tokenizer) == count_message(resent, tokenizer)


def test_a_rewrite_given_the_costs_is_the_rewrite_that_counts_them() -> None:
    history = [m for n in range(40) for m in turn(n)]
    recalled = tuple(Recollection("turn", f"t{n}", f"Earlier: the ferry to Madeira, {n}.",
                                  (f"t{n}",), n, 1.0 - n / 100) for n in range(12))
    for budget in (300, 1_500, 100_000):
        request = RewriteRequest(
            instructions=(Message.of("system", "Be brief."),), history=tuple(history),
            current=(Message.of("user", "And the night train?"),),
            policy=ContextPolicy(max_context_tokens=budget, compact_to_tokens=0, outside_share=1.0,
                                 reserve_completion_tokens=0),
            memory=MemoryContext(summary_chunks=("Summary: trips in Portugal.",),
                                 recalled=recalled),
            history_ids=ids_of(history))
        given_costs = dataclasses.replace(request,
                                          history_costs=count_each(request.history, O200K))
        assert rewrite(given_costs, O200K) == rewrite(request, O200K)
    with pytest.raises(ValueError):
        dataclasses.replace(request, history_costs=(1, 2))
