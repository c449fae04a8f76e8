"""Property tests of the rewrite's invariants over random conversations and policies.

Random requests hold tool-call groups, long messages, multimodal content, messages before the
first user message, tool results whose call is missing, and memory (summary chunks, a profile,
recollections of turns, chunks and facts, some of them already in the history by id, and
random memory shares). Every invariant of gateway/core/context/rewrite.py is checked on each. The
main
suite counts with the fast `WordTokenizer`; a smaller one repeats it with the real tiktoken
tokenizer on arbitrary Unicode (CJK, emoji).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gateway.core.context.blocks import (
    MemoryContext,
    PinnedMessage,
    one_line,
    render_blocks,
    framing_for,
    render_profile,
    render_recalled,
    render_summary,
    split_anchor,
)
from gateway.core.messages import Message
from gateway.core.context.pinned import pin_line, pin_text, render_pinned
from gateway.core.policy import ContextPolicy
from gateway.core.recall.recollection import Recollection
from gateway.core.context.rewrite import Rewrite, RewriteRequest, rewrite
from gateway.core.context.tool_loop import is_tool_loop
from gateway.core.text.tokens import REPLY_PRIMING, Tokenizer, count_message, count_messages
from gateway.core.context.truncation import TRUNCATION_MARKER, truncate_message
from gateway.tokenizer import tokenizer_for_encoding
from tests.unit.test_rewrite import WordTokenizer

INVARIANT_BRANCHES = ("whole history", "compacted")
PINNED_BRANCHES = ("pins shown",)
"""The deeper branches of check_invariants / check_pinned that every suite of random requests
must reach (the others end early: a tool loop, instructions and current turn over budget, no
pin shown)."""

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REAL = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- strategies ---------------------------------------------------------------------------------

word_texts = st.lists(st.sampled_from(["a", "bb", "ccc", "数据", "naïve", "x"]),
                      max_size=60).map(" ".join)
unicode_texts = st.one_of(
    st.text(st.characters(codec="utf-8"), max_size=200),
    st.sampled_from(["你好，世界！", "今天天气很好。", "👍🏽 ok ", "hello world. "])
    .flatmap(lambda s: st.integers(0, 40).map(lambda n: s * n)),
)
IMAGE = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}


def contents(texts: st.SearchStrategy[str]) -> st.SearchStrategy:
    part = st.one_of(texts.map(lambda t: {"type": "text", "text": t}), st.just(IMAGE))
    return st.one_of(texts, texts, st.lists(part, min_size=1, max_size=4))


@st.composite
def requests(draw, texts: st.SearchStrategy[str], tok: Tokenizer,
             calls: st.SearchStrategy[bool] = st.booleans()) -> RewriteRequest:
    """`calls`: whether an assistant step calls tools (half of them by default: most requests
    are then agents' tool loops)."""
    content = contents(texts)
    next_id = iter(range(10_000))

    def steps(allow_final_text: bool) -> list[Message]:
        out: list[Message] = []
        for _ in range(draw(st.integers(0, 3))):
            if draw(calls):
                ids = [f"call_{next(next_id)}" for _ in range(draw(st.integers(1, 3)))]
                out.append(Message.of("assistant", draw(st.none() | texts), tool_calls=[
                    {"id": i, "type": "function",
                     "function": {"name": "f", "arguments": draw(texts)}} for i in ids]))
                out.extend(Message.of("tool", draw(content), tool_call_id=i) for i in ids)
            elif allow_final_text:
                out.append(Message.of("assistant", draw(content)))
        return out

    history: list[Message] = []
    if draw(st.integers(0, 9)) == 0:  # results whose call is not in the history
        history.append(Message.of("tool", draw(texts), tool_call_id="call_missing"))
    if draw(st.booleans()):  # a greeting before the first user message
        history.extend(steps(allow_final_text=True))
    for _ in range(draw(st.integers(0, 8))):
        history.append(Message.of("user", draw(content), **draw(st.just({}) | st.just(
            {"name": "alice"}))))
        history.extend(steps(allow_final_text=True))
    current = [Message.of("user", draw(content))] + steps(allow_final_text=False)
    instructions = [Message.of(draw(st.sampled_from(["system", "developer"])), draw(texts))
                    for _ in range(draw(st.integers(0, 2)))]
    ids = draw(history_ids(len(history)))
    memory = draw(st.just(MemoryContext()) | memories(texts, ids) | memories(texts, ids))
    # Budgets around the interesting range: from a little less than instructions + current
    # need, to more than the whole request with its memory.
    fixed = count_messages(instructions + current, tok)
    everything = count_messages(instructions + history + current + [
        block for _, block in render_blocks(memory).by_priority()], tok)
    reserve = draw(st.integers(0, 200))
    need = everything - fixed
    prompt_budget = max(0, fixed + draw(st.integers(-20, need + need // 2 + 20)))
    policy = ContextPolicy(
        max_context_tokens=prompt_budget + reserve, compact_to_tokens=0,  # one budget
        outside_share=1.0,  # the whole room for memory from outside a whole history
        assembly="rolling",  # test_steps.py draws these with `stepped`
        reserve_completion_tokens=reserve,
        max_recent_turns=draw(st.sampled_from(range(11))),
        truncate_message_tokens=draw(st.sampled_from(range(101))),
        min_recent_turns=draw(st.sampled_from(range(3))),
        summary_share=draw(SHARES), profile_share=draw(SHARES), recall_share=draw(SHARES),
    )
    return RewriteRequest(instructions=tuple(instructions), history=tuple(history),
                          current=tuple(current), policy=policy, memory=memory,
                          history_ids=ids)


SHARES = st.sampled_from([0.0, 0.05, 0.15, 0.3, 0.5, 1.0])
FEW_CALLS = st.integers(0, 3).map(lambda n: n == 0)
"""One assistant step in four calls tools: most requests are chats, with their memory blocks."""


def history_ids(n: int) -> st.SearchStrategy[tuple[str | None, ...]]:
    """Unknown (empty), or an id per message with the newest few not stored yet (None)."""
    stored = st.integers(0, 2).map(lambda unstored: tuple(
        f"m{i}" if i < n - unstored else None for i in range(n)))
    return st.just(()) | stored | stored


@st.composite
def memories(draw, texts: st.SearchStrategy[str],
             ids: tuple[str | None, ...]) -> MemoryContext:
    chunks = draw(st.lists(texts, max_size=3))
    known = [i for i in ids if i is not None] + ["old1", "old2"]
    recalled = []
    for n in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["turn", "chunk", "fact"]))
        id_ = f"{kind}{n}"
        free = [i for i in known if i not in {r.id for r in recalled}]
        if kind == "turn" and free and draw(st.booleans()):  # one of the history's messages
            id_ = draw(st.sampled_from(free))
        text = draw(texts | st.sampled_from(chunks)) if chunks else draw(texts)
        recalled.append(Recollection(
            kind=kind, id=id_, text=text,
            source_ids=tuple(draw(st.lists(st.sampled_from(known), max_size=3, unique=True))),
            position=-1 if kind == "fact" else draw(st.integers(0, 20)), score=0.0))
    return MemoryContext(summary_chunks=chunks, profile=draw(st.none() | texts),
                         recalled=recalled)


# --- the invariants ---------------------------------------------------------------------------


def check_tool_loop(request: RewriteRequest, out: Rewrite, tok: Tokenizer) -> bool:
    """The invariants of an agent's tool loop (gateway/core/context/tool_loop.py; the rest of
    them in tests/unit/test_tool_loop.py); True when the request is one (and then the chat
    invariants below do not apply)."""
    instructions, history, current = request.instructions, request.history, request.current
    if not is_tool_loop(history, current):
        return False
    messages = out.messages
    assert out.tokens_forwarded == count_messages(messages, tok)
    assert out.tokens_original == count_messages(instructions + history + current, tok)
    assert all(a is b for a, b in zip(messages, instructions))
    assert all(a is b for a, b in zip(reversed(messages), reversed(current)))
    assert len(messages) >= len(instructions) + len(current)
    forwardable = forwardable_history(history)
    task = next((m for m in forwardable if m.role == "user"), None)
    if out.over_budget:
        # the newest exchange with the task and the user's instructions only
        middle = messages[len(instructions):len(messages) - len(current)]
        assert middle[:1] == ((task,) if task else ())
        assert all(m.role == "user" for m in middle)
        assert count_messages(messages, tok) > request.policy.whole_prompt_budget
        return True
    assert out.tokens_forwarded <= request.policy.whole_prompt_budget
    check_tool_calls_travel_with_their_results(messages)
    if task is not None:
        assert any(m is task for m in messages)  # the task is always forwarded
    middle = messages[len(instructions):len(messages) - len(current)]
    if count_messages(instructions + forwardable + current, tok) > \
            request.policy.whole_prompt_budget and task is not None:
        # compacted: the conversation opens with the task
        assert next(m for m in middle + current if m.role != "system") is task
    return True


def check_invariants(request: RewriteRequest, out: Rewrite, tok: Tokenizer) -> str:
    """Checks the rewrite's invariants; returns the branch of them the request reached:
    "tool loop", "over budget", "whole history" or "compacted" (the deepest)."""
    policy, budget = request.policy, request.policy.prompt_budget
    instructions, history, current = request.instructions, request.history, request.current
    messages = out.messages
    if check_tool_loop(request, out, tok):
        return "tool loop"

    # Counts are what they say.
    assert out.tokens_forwarded == count_messages(messages, tok)
    assert out.tokens_original == count_messages(instructions + history + current, tok)

    # Instructions and the current turn: verbatim, first and last, never dropped.
    assert messages[:len(instructions)] == instructions
    assert all(a is b for a, b in zip(messages, instructions))
    assert messages[len(messages) - len(current):] == current
    assert all(a is b for a, b in zip(reversed(messages), reversed(current)))

    fixed_cost = count_messages(instructions + current, tok)
    assert out.over_budget == (fixed_cost > budget)
    if out.over_budget:
        assert messages == instructions + current
        return "over budget"
    assert out.tokens_forwarded <= budget

    forwardable = forwardable_history(history)
    if count_messages(instructions + forwardable + current, tok) <= budget:
        check_whole_history(request, out, forwardable)
        check_tool_calls_travel_with_their_results(messages)
        return "whole history"

    # The middle: [summary] [profile] [recent history] [recalled].
    middle = messages[len(instructions):len(messages) - len(current)]
    n_head = sum(1 for name in out.memory_blocks if name != "recalled")
    n_tail = int("recalled" in out.memory_blocks)
    head, tail = middle[:n_head], middle[len(middle) - n_tail:]
    window = middle[n_head:len(middle) - n_tail]
    if out.message_limit is not None:
        # The newest turns were fitted to their share by shortening every history message.
        assert out.message_limit < policy.truncate_message_tokens
        policy = replace(policy, truncate_message_tokens=out.message_limit)
        request = replace(request, policy=policy)
    window_room = check_memory(request, out, head, window, tail, tok)

    # The window is a contiguous suffix of the history, each message whole or shortened.
    suffix = history[len(history) - len(window):] if window else ()
    assert len(window) == out.history_kept
    for kept, original in zip(window, suffix):
        check_kept_message(kept, original, policy.truncate_message_tokens, tok)
    assert out.truncated == sum(1 for k, o in zip(window, suffix) if k is not o)

    users = sum(1 for m in window if m.role == "user")
    assert out.recent_turns == users <= policy.max_recent_turns
    check_tool_calls_travel_with_their_results(messages)
    check_window_starts_at_a_turn(history, window)
    check_window_is_as_long_as_it_may_be(request, out, window, window_room, tok)
    return "compacted"


def forwardable_history(history: tuple[Message, ...]) -> tuple[Message, ...]:
    """The history without the tool results at its start (their call is not there)."""
    start = 0
    while start < len(history) and history[start].role in ("tool", "function"):
        start += 1
    return history[start:]


def check_whole_history(request: RewriteRequest, out: Rewrite,
                        forwardable: tuple[Message, ...]) -> None:
    """All the forwardable history fits: it goes whole and verbatim, with only memory from
    outside it (profile, recalled items not stemming from it), never a summary."""
    messages, instructions, current = out.messages, request.instructions, request.current
    middle = messages[len(instructions):len(messages) - len(current)]
    assert "summary" not in out.memory_blocks and out.summary_chunks == 0
    # pins first, the profile and recalled items after the history (it is the stable prefix)
    n_head = int("pinned" in out.memory_blocks)
    n_tail = sum(1 for b in out.memory_blocks if b in ("profile", "recalled"))
    window = middle[n_head:len(middle) - n_tail]
    assert out.stable_messages == (len(messages) if n_tail == 0  # the current turn too
                                   else len(instructions) + n_head + len(window))
    assert window == forwardable and all(a is b for a, b in zip(window, forwardable))
    assert (out.history_kept, out.truncated) == (len(forwardable), 0)
    assert out.tokens_forwarded <= out.tokens_original + out.profile_tokens + out.recalled_tokens
    ids = {i for i in request.history_ids if i is not None}
    by_id = {(r.id): r for r in request.memory.recalled}
    for shown in out.recalled_ids:
        r = by_id[shown]
        assert not (r.source_ids and ids.issuperset(r.source_ids))
        assert r.kind == "fact" or r.id not in ids


def check_kept_message(kept: Message, original: Message, limit: int, tok: Tokenizer) -> None:
    # Text parts each within the limit are not cut, even when their newline-joined text is
    # one token over it (e.g. two empty parts: "\n").
    if tok.count(original.text) <= limit or truncate_message(original, limit, tok) is original:
        assert kept is original
    else:
        assert kept == truncate_message(original, limit, tok)
        assert (kept.role, kept.extra) == (original.role, original.extra)
        assert TRUNCATION_MARKER in kept.text
        text_parts = [kept.content] if isinstance(kept.content, str) else [
            p["text"] for p in kept.to_openai()["content"] if "text" in p]
        heads = [t.removesuffix(TRUNCATION_MARKER) for t in text_parts]
        assert sum(tok.count(t) for t in heads) <= limit
        non_text = [p for p in (original.to_openai()["content"] or [])
                    if isinstance(p, dict) and "text" not in p]
        assert non_text == [p for p in (kept.to_openai()["content"] or [])
                            if isinstance(p, dict) and "text" not in p]


def check_tool_calls_travel_with_their_results(messages: tuple[Message, ...]) -> None:
    """Each tool message follows, through tool messages only, the assistant call it answers;
    each forwarded call's results (all of them in these tests) follow it."""
    for i, m in enumerate(messages):
        if m.role == "tool":
            j = i - 1
            while j >= 0 and messages[j].role == "tool":
                j -= 1
            assert j >= 0 and m.get("tool_call_id") in messages[j].tool_call_ids
        if m.tool_call_ids:
            answered = {r.get("tool_call_id") for r in messages[i + 1:i + 1 + len(m.tool_call_ids)]}
            assert answered == set(m.tool_call_ids)


def check_window_starts_at_a_turn(history: tuple[Message, ...], window: tuple) -> None:
    """The window opens with a user message; or it has none at all (the newest turn, cut);
    or it is all the forwardable history, opening before the first user message."""
    if not window or window[0].role == "user":
        return
    assert window[0].role != "tool"
    if any(m.role == "user" for m in window):
        start = len(history) - len(window)
        assert all(m.role == "tool" for m in history[:start])


def check_window_is_as_long_as_it_may_be(request: RewriteRequest, out: Rewrite, window: tuple,
                                         window_room: int, tok: Tokenizer) -> None:
    """Greedy: the next older turn (or, for a cut newest turn, the next older unit) was left
    out because of the turn cap or the room the window had, not at random."""
    history, policy = request.history, request.policy
    start = len(history) - len(window)
    if all(m.role == "tool" for m in history[:start]):
        return  # all that can be forwarded is forwarded
    users_left_out = any(m.role == "user" for m in history[:start])
    if not any(m.role == "user" for m in window):
        if users_left_out and policy.max_recent_turns == 0:
            return  # the newest turn is a user turn, and no user turn may be kept
        # The whole newest turn did not fit: neither does its next older unit.
        unit_start = start - 1
        while history[unit_start].role == "tool":
            unit_start -= 1
        previous = history[unit_start:start]
    else:
        turn_start = start - 1
        while turn_start > 0 and history[turn_start].role != "user":
            turn_start -= 1
        while history[turn_start].role == "tool":  # results whose call is missing
            turn_start += 1
        previous = history[turn_start:start]
        if previous[0].role == "user" and out.recent_turns >= policy.max_recent_turns:
            return
    shortened = tuple(truncate_message(m, policy.truncate_message_tokens, tok) for m in previous)
    assert cost(window + shortened, tok) > window_room


def check_memory(request: RewriteRequest, out: Rewrite, head: tuple, window: tuple, tail: tuple,
                 tok: Tokenizer) -> int:
    """Each block within its share, as large as its share allows, rendered from what it
    reports; nothing recalled that the window or the summary already shows; the recalled block
    packed best first into what is left. Returns the room the recent window was given."""
    policy, memory = request.policy, request.memory
    room = policy.prompt_budget - REPLY_PRIMING - cost(request.instructions + request.current, tok)

    def share(fraction: float) -> int:
        return max(0, int(fraction * room))

    framing = framing_for(m.text for m in request.current if m.role == "user")
    chunks = [c for c in memory.summary_chunks if c.strip()]
    k = out.summary_chunks
    summary = render_summary(chunks[len(chunks) - k:], framing) if k else None
    assert all(cost((render_summary(chunks[-j:], framing),), tok) > share(policy.summary_share)
               for j in range(k + 1, len(chunks) + 1))
    profile = render_profile(memory.profile, framing)
    left = room - cost((summary,), tok)
    if profile is not None and cost((profile,), tok) > min(share(policy.profile_share), left):
        profile = None
    left -= cost((profile,), tok)
    assert head == tuple(b for b in (summary, profile) if b is not None)
    assert (out.summary_tokens, out.profile_tokens) == (cost((summary,), tok),
                                                        cost((profile,), tok))

    forwarded = {one_line(c) for c in chunks[len(chunks) - k:]}
    offered, said = [], set()
    for r in memory.recalled:  # a turn or chunk saying what a better-ranked one says: left out
        if not r.text.strip() or (r.kind == "chunk" and one_line(r.text) in forwarded):
            continue
        if r.kind != "fact":
            if (text := split_anchor(one_line(r.text))[1]) in said:
                continue
            said.add(text)
        offered.append(r)
    all_recalled = render_recalled(offered, framing)
    # The newest `min_recent_turns` are served before recall's share: what the window alone
    # takes of them (the rewrite without recollections and with that turn cap).
    first = rewrite(replace(request, memory=replace(memory, recalled=()), policy=replace(
        policy, max_recent_turns=min(policy.min_recent_turns, policy.max_recent_turns))), tok)
    first_window = (first.tokens_forwarded - REPLY_PRIMING - first.summary_tokens
                    - first.profile_tokens - cost(request.instructions + request.current, tok))
    reserved = 0 if all_recalled is None else max(0, min(share(policy.recall_share),
                                                         left - first_window,
                                                         cost((all_recalled,), tok)))
    window_room = left - reserved
    assert cost(window, tok) <= window_room

    # Nothing twice: no recalled turn is a window message forwarded whole, no recalled turn or
    # chunk has all its sources among them, no recalled chunk is a forwarded summary chunk. A
    # window message cut to fit does not count: its turn may be recalled whole.
    start = len(request.history) - len(window)
    ids = request.history_ids[start:] or (None,) * len(window)
    whole = [(i, shown_as) for i, shown_as, message in zip(ids, window, request.history[start:])
             if shown_as == message]
    shown = {i for i, _ in whole if i is not None}

    def in_window(r: Recollection) -> bool:
        return r.kind != "fact" and ((r.kind == "turn" and r.id in shown) or (
            bool(r.source_ids) and shown.issuperset(r.source_ids)))

    # Nor a turn or chunk saying what a whole window message or a higher-ranked item says.
    texts = {one_line(m.text) for _, m in whole} - {""}
    eligible = []
    for r in offered:
        text = split_anchor(one_line(r.text))[1]
        if r.kind != "fact" and text in texts:
            continue
        if not in_window(r):
            eligible.append(r)
            if r.kind != "fact":
                texts.add(text)
    by_id = {r.id: r for r in memory.recalled}
    kept = [by_id[i] for i in out.recalled_ids]
    assert all(r in eligible for r in kept)
    assert tail == ((render_recalled(kept, framing),) if kept else ())
    assert out.recalled == len(kept) and out.recalled_tokens == cost(tail, tok)
    facts = [r for r in kept if r.kind == "fact"]
    assert kept[:len(facts)] == facts  # facts first, then chronologically
    assert [r.position for r in kept[len(facts):]] == sorted(r.position for r in kept[len(facts):])

    # Best first into what is left (the whole room when there is no history or block).
    recall_room = left - cost(window, tok)
    assert cost(tail, tok) <= recall_room
    rank = {r.id: n for n, r in enumerate(memory.recalled)}
    for r in eligible:
        if r.id not in out.recalled_ids:
            higher = [x for x in kept if rank[x.id] < rank[r.id]]
            assert cost((render_recalled(higher + [r], framing),), tok) > recall_room
    return window_room


def cost(messages, tok: Tokenizer) -> int:
    """The summed count_message of `messages`, None counting 0."""
    return sum(count_message(m, tok) for m in messages if m is not None)


def check_everything_fits_means_unchanged(request: RewriteRequest, out: Rewrite,
                                          tok: Tokenizer) -> None:
    everything = request.instructions + request.history + request.current
    p = request.policy
    if (request.memory == MemoryContext()
            and (not request.history or request.history[0].role != "tool")
            and sum(1 for m in request.history if m.role == "user") <= p.max_recent_turns
            and all(tok.count(m.text) <= p.truncate_message_tokens for m in request.history)
            and count_messages(everything, tok) <= p.prompt_budget):
        assert out.messages == everything
        assert all(a is b for a, b in zip(out.messages, everything))


def check_all(request: RewriteRequest, tok: Tokenizer) -> str:
    """Every check of one request; returns the branch of the invariants it reached."""
    snapshot = [m.to_openai() for m in request.instructions + request.history + request.current]
    out = rewrite(request, tok)
    branch = check_invariants(request, out, tok)
    check_everything_fits_means_unchanged(request, out, tok)
    assert rewrite(request, tok) == out  # deterministic
    assert snapshot == [m.to_openai()
                        for m in request.instructions + request.history + request.current]
    return branch


def reach(reached: Counter[str], branch: str) -> None:
    """Records that an example reached `branch`: a hypothesis event (in hypothesis's
    observations of the example) and a count the test checks once its examples have run (a
    failure lists every branch's count)."""
    event(branch)
    reached[branch] += 1


def assert_reached(reached: Counter[str], *branches: str) -> None:
    """Some example reached each of `branches`: a property whose examples all end early
    checks nothing of what follows."""
    missing = [b for b in branches if not reached[b]]
    assert not missing, f"no example reached {missing}; reached: {dict(reached)}"


# --- the suites -------------------------------------------------------------------------------

WORDS = WordTokenizer()


def test_rewrite_invariants_hold_for_random_requests():
    reached: Counter[str] = Counter()

    @FAST
    @given(requests(word_texts, WORDS))
    def run(request):
        reach(reached, check_all(request, WORDS))

    run()
    assert_reached(reached, *INVARIANT_BRANCHES)


@FAST
@given(requests(word_texts, WORDS).map(
    lambda r: RewriteRequest(r.instructions, r.history, r.current, ContextPolicy(
        max_context_tokens=100_000, compact_to_tokens=0, outside_share=1.0,
        reserve_completion_tokens=0,
        assembly="rolling",
        max_recent_turns=100,
        truncate_message_tokens=100_000))))
def test_generous_policy_forwards_the_request_unchanged(request):
    out = rewrite(request, WORDS)
    tail = request.history
    if tail and tail[0].role == "tool":
        tail = tail[1:]
    assert out.messages == request.instructions + tail + request.current


CL100K = tokenizer_for_encoding("cl100k_base")
O200K = tokenizer_for_encoding("o200k_base")


@pytest.mark.parametrize("tok", [CL100K, O200K], ids=["cl100k", "o200k"])
def test_rewrite_invariants_hold_with_tiktoken(tok):
    reached: Counter[str] = Counter()

    @REAL
    @given(requests(unicode_texts, tok))
    def run(request):
        reach(reached, check_all(request, tok))

    run()
    assert_reached(reached, *INVARIANT_BRANCHES)


# --- with pinned messages ---------------------------------------------------------------------

@st.composite
def pinned_requests(draw, texts: st.SearchStrategy[str], tok: Tokenizer,
                    calls: st.SearchStrategy[bool] = st.booleans()) -> RewriteRequest:
    """A random request (above) with pins: some of the history's own messages (by id, or by
    text under another id), some from elsewhere; every source and role; any share."""
    request = draw(requests(texts, tok, calls))
    ids = [i for i in request.history_ids if i is not None]
    pins = []
    for n in range(draw(st.integers(1, 5))):
        source = draw(st.sampled_from(["client", "rule", "api"]))
        role = draw(st.sampled_from(["user", "user", "system", "assistant", "tool"]))
        if request.history and draw(st.booleans()):
            at = draw(st.integers(0, len(request.history) - 1))
            message = request.history[at]
            id_ = request.history_ids[at] if request.history_ids and draw(st.booleans()) \
                else f"x{n}"
            pins.append(PinnedMessage(id_ or f"x{n}", message, source, float(n)))
        else:
            pins.append(PinnedMessage(draw(st.sampled_from(ids + [f"p{n}"])) if ids else
                                      f"p{n}", Message.of(role, draw(texts)), source,
                                      draw(st.floats(0, 10))))
    unique = tuple({p.id: p for p in pins}.values())
    fixed = count_messages(request.instructions + request.current, tok)
    # Room for the pins too: budgets from below the fixed part to past everything.
    extra = sum(tok.count(p.message.text) + 60 for p in unique)
    budget = max(0, request.policy.prompt_budget + draw(st.integers(-20, extra)))
    if draw(st.integers(0, 4)) == 0:
        budget = fixed + draw(st.integers(-5, 40))
    policy = replace(request.policy, max_context_tokens=budget, reserve_completion_tokens=0,
                     pinned_share=draw(SHARES))
    return replace(request, policy=policy, memory=replace(request.memory, pinned=unique))


def check_pinned(request: RewriteRequest, out: Rewrite, tok: Tokenizer) -> str:
    """Budget, placement, share, whole items, nothing shown twice; returns the branch reached:
    "tool loop", "over budget", "no pin shown" or "pins shown" (the deepest)."""
    policy, budget = request.policy, request.policy.prompt_budget
    messages, instructions, current = out.messages, request.instructions, request.current
    if check_tool_loop(request, out, tok):
        return "tool loop"
    assert out.tokens_forwarded == count_messages(messages, tok)
    assert messages[:len(instructions)] == instructions
    assert messages[len(messages) - len(current):] == current
    if out.over_budget:
        assert messages == instructions + current and out.pinned == 0
        return "over budget"
    assert out.tokens_forwarded <= budget
    check_tool_calls_travel_with_their_results(messages)
    by_id = {p.id: p for p in request.memory.pinned}
    shown = [by_id[i] for i in out.pinned_ids]
    if not shown:
        assert "pinned" not in out.memory_blocks and out.pinned_tokens == 0
        return "no pin shown"
    block = messages[len(instructions)]
    framing = framing_for(m.text for m in request.current if m.role == "user")
    assert block == render_pinned(shown, framing) and out.memory_blocks[0] == "pinned"
    assert out.pinned_tokens == count_message(block, tok)
    room = budget - REPLY_PRIMING - cost(instructions + current, tok)
    assert out.pinned_tokens <= max(0, int(policy.pinned_share * room))
    for p in shown:  # whole, escaped the same way as any item
        assert pin_line(p) in block.text
    # Nothing twice: a pin shown is no message forwarded whole beside it (by text).
    others = [m for m in messages if m is not block]
    texts = {one_line(m.text) for m in others} - {""}
    assert not any(pin_text(p) in texts for p in shown)
    assert len({pin_text(p) for p in shown}) == len(shown)
    return "pins shown"


def test_pinned_messages_keep_the_budget_and_are_whole_and_shown_once():
    reached: Counter[str] = Counter()

    @FAST
    @given(pinned_requests(word_texts, WORDS))
    def run(request):
        reach(reached, check_pinned(request, rewrite(request, WORDS), WORDS))

    run()
    assert_reached(reached, *PINNED_BRANCHES)


def test_pinned_messages_keep_the_budget_with_tiktoken():
    reached: Counter[str] = Counter()

    @REAL
    @given(pinned_requests(unicode_texts, CL100K, calls=FEW_CALLS))
    def run(request):
        reach(reached, check_pinned(request, rewrite(request, CL100K), CL100K))

    run()
    assert_reached(reached, *PINNED_BRANCHES)
