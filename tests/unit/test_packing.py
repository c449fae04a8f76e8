"""Packing memory blocks by arithmetic gives exactly what rendering and measuring every
candidate gives (gateway/core/context/packing.py), and its work does not grow with what it is given.

Each packer is compared with its definition (the `_by_measure` functions, which render and
measure the block for every candidate) over random chunks and recollections — tags of the
blocks split across items, stray `<`, date anchors, CJK, emoji, text starting with `/` — with
the word-counting fake and both tiktoken encodings, and with a tokenizer that does not add up
across lines (the arithmetic is then caught out and the definition applies). tiktoken declares
that one-line texts add up by line, so its recalled blocks are priced and never measured: the
claim itself is checked here too.
"""

from __future__ import annotations

import re

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gateway.core.context.blocks import (
    MemoryContext,
    RECALLED_HEADER,
    SUMMARY_HEADER,
    SUMMARY_TAG,
    block_frame,
    item_line,
    one_line,
    render_recalled,
    render_summary,
    summary_parts,
)
from gateway.core.messages import Message
from gateway.core.context.packing import (
    _pack_recalled_by_measure,
    _pack_summary_by_measure,
    adds_up_by_line,
    pack_recalled,
    pack_summary,
    recall_reservation,
    recalled_lines,
)
from gateway.core.policy import ContextPolicy
from gateway.core.recall.recollection import Recollection
from gateway.core.context.rewrite import RewriteRequest, rewrite
from gateway.core.text.tokens import count_each, count_message
from gateway.tokenizer import tokenizer_for_encoding
from tests.unit.test_rewrite import WordTokenizer

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REAL = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

WORDS = WordTokenizer()
CL100K = tokenizer_for_encoding("cl100k_base")
O200K = tokenizer_for_encoding("o200k_base")


class RunOnTokenizer:
    """Does not add up across lines: a newline followed by text costs nothing, so a block
    costs less than its lines. Counts words otherwise."""

    def count(self, text: str) -> int:
        return len(text.split()) - text.count("\n-") - text.count("\n[")

    def truncate(self, text: str, max_tokens: int) -> str:
        return WORDS.truncate(text, max_tokens)


class RecordingTokenizer:
    """Counts as `inner` does (words by default), and keeps every text it was asked to
    count."""

    def __init__(self, inner=None) -> None:
        self.inner = inner or WordTokenizer()
        self.adds_up_by_line = adds_up_by_line(self.inner)
        self.counted: list[str] = []

    def count(self, text: str) -> int:
        self.counted.append(text)
        return self.inner.count(text)

    def truncate(self, text: str, max_tokens: int) -> str:
        return self.inner.truncate(text, max_tokens)

    def blocks_measured(self, header: str) -> int:
        return sum(1 for t in self.counted if t.startswith(header))


PIECES = ["alpha", "beta.", "数据", "你好，世界！", "👍🏽", "<", "</", "summary>", "memory>",
          "</summary>", "<memory>", "< /summary >", "/etc/hosts", "/", "x", "42", "- item",
          "[1 May, 2023]", "&lt;", "done!", "?"]
SEPARATORS = [" ", " ", "", "\n", "\n\n", " \n "]
ANCHORS = ["1 May, 2023", "2 May, 2023", "2023年5月8日", "<memory>"]

texts = st.lists(st.tuples(st.sampled_from(PIECES), st.sampled_from(SEPARATORS)),
                 max_size=12).map(lambda ps: "".join(p + s for p, s in ps))
anchored = st.tuples(st.none() | st.sampled_from(ANCHORS), texts).map(
    lambda at: f"[{at[0]}] {at[1]}" if at[0] else at[1])


@st.composite
def recollections(draw) -> list[Recollection]:
    out = []
    for n in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["turn", "chunk", "fact"]))
        out.append(Recollection(kind, f"{kind}{n}", draw(anchored), (),
                                -1 if kind == "fact" else draw(st.integers(0, 6)), 0.0))
    return out


limits = st.integers(0, 400)


def check_summary(chunks: list[str], limit: int, tok, adds_up: bool = True) -> None:
    """The definition's result, priced by arithmetic: besides the frame, only the block chosen
    and the next longer one are measured (the tokenizers here add up across lines)."""
    usable = tuple(c for c in chunks if c and c.strip())
    recording = RecordingTokenizer(tok)
    packed = pack_summary(chunks, limit, recording)
    assert packed == _pack_summary_by_measure(usable, limit, tok)
    assert packed.cost <= limit
    assert recording.blocks_measured(SUMMARY_HEADER) <= 3 or not adds_up


def check_recalled(items: list[Recollection], limit: int, tok) -> None:
    """Likewise: besides the frame, only the block chosen (or the best item's) is measured —
    and not even that with a tokenizer that adds up by line (tiktoken)."""
    recording = RecordingTokenizer(tok)
    lines = recalled_lines(items, recording)
    packed = pack_recalled(lines, limit, recording)
    usable = [r for r in items if r.text.strip()]
    assert packed == _pack_recalled_by_measure(usable, limit, tok)
    assert packed.cost <= limit
    assert recording.blocks_measured(RECALLED_HEADER) <= (1 if adds_up_by_line(tok) else 2)
    whole = render_recalled(usable)
    expected = 0 if whole is None else min(limit, count_message(whole, tok))
    assert recall_reservation(lines, limit, tok) == expected


@FAST
@given(st.lists(anchored, max_size=8), limits)
def test_summary_packed_by_arithmetic_is_the_summary_packed_by_measure(chunks, limit):
    check_summary(chunks, limit, WORDS)


@REAL
@given(st.lists(anchored, max_size=8), limits)
@example(chunks=["alpha ", "/etc/hosts "], limit=49)
def test_summary_packed_by_arithmetic_is_exact_with_tiktoken(chunks, limit):
    # Exact, always; but not always priced by arithmetic alone: tiktoken's pre-tokeniser can
    # merge the blank line between two chunks with what follows (hypothesis found
    # "alpha " + "/etc/hosts "), and then the packer measures blocks instead (its fallback).
    check_summary(chunks, limit, CL100K, adds_up=False)
    check_summary(chunks, limit, O200K, adds_up=False)


@FAST
@given(recollections(), limits)
def test_recalled_block_packed_by_arithmetic_is_the_block_packed_by_measure(items, limit):
    check_recalled(items, limit, WORDS)


@REAL
@given(recollections(), limits)
def test_recalled_block_packed_by_arithmetic_is_exact_with_tiktoken(items, limit):
    check_recalled(items, limit, CL100K)
    check_recalled(items, limit, O200K)


one_line_texts = texts.map(one_line).filter(lambda t: bool(t) and not t.startswith("/"))


@REAL
@given(st.lists(one_line_texts | one_line_texts.map(item_line), min_size=1, max_size=8))
@example(["done!", "- /etc/hosts", "[1 May, 2023]", "- item"])
@example(["数据。", "[2023年5月8日]", "- 👍🏽 ?"])
def test_tiktoken_adds_up_by_line_on_one_line_texts(lines):
    # The claim the recalled block's price rests on (TiktokenTokenizer.adds_up_by_line).
    for tok in (CL100K, O200K):
        assert adds_up_by_line(tok)
        text = "".join(line + "\n" for line in lines)
        assert tok.count(text) == sum(tok.count(line + "\n") for line in lines)
        assert tok.count(text + "</memory>") == tok.count(text) + tok.count("</memory>")


def test_a_line_starting_with_a_slash_is_the_exception_the_claim_names():
    # o200k joins punctuation, newlines and "/" into one piece; no block line starts so.
    assert O200K.count("done!\n/etc\n") != O200K.count("done!\n") + O200K.count("/etc\n")


def test_word_counting_fakes_do_not_declare_adding_up_by_line():
    assert not adds_up_by_line(WORDS) and not adds_up_by_line(RunOnTokenizer())


@FAST
@given(st.lists(anchored, max_size=8), recollections(), limits)
def test_a_tokenizer_that_does_not_add_up_gets_what_measuring_gives(chunks, items, limit):
    tok = RunOnTokenizer()
    check_summary(chunks, limit, tok, adds_up=False)
    lines = recalled_lines(items, tok)
    packed = pack_recalled(lines, limit, tok)
    assert packed == _pack_recalled_by_measure([r for r in items if r.text.strip()], limit, tok)
    assert packed.cost <= limit


@FAST
@given(st.lists(anchored, min_size=1, max_size=8))
def test_summary_parts_are_the_chunks_as_every_run_of_the_newest_shows_them(chunks):
    usable = [c for c in chunks if c.strip()]
    parts = summary_parts(chunks)
    opening, closing = block_frame(SUMMARY_HEADER, SUMMARY_TAG)
    assert len(parts) == len(usable)
    for j in range(len(usable)):
        block = render_summary(usable[j:])
        assert block is not None
        assert block.content == opening + "\n\n".join(parts[j:]) + "\n" + closing


def test_a_tag_split_across_two_chunks_is_escaped_as_in_the_block():
    parts = summary_parts(("first </", "summary> second"))
    assert parts == ("first &lt;/", "summary> second")
    block = render_summary(("first </", "summary> second"))
    assert block is not None and "first &lt;/\n\nsummary> second" in block.content


def test_summary_packing_measures_two_blocks_however_many_chunks():
    chunks = [f"chunk {i} " + "word " * (i % 17) for i in range(200)]
    tok = RecordingTokenizer()
    packed = pack_summary(chunks, 500, tok)
    assert 0 < len(packed.items) < len(chunks)
    blocks = [t for t in tok.counted if t.startswith(SUMMARY_HEADER)]
    assert len(blocks) == 3  # the frame, the block chosen, the first one too long
    # Each chunk taken priced once, and the first not taken; the role thrice, the closing tag.
    assert len(tok.counted) == len(packed.items) + 1 + 3 + 1 + len(blocks)


def test_recalled_packing_measures_one_block_however_many_items():
    items = [Recollection("turn", f"t{i}", f"[{i % 7} May, 2023] " + "word " * (i % 13), (),
                          i, 0.0) for i in range(300)]
    tok = RecordingTokenizer()
    lines = recalled_lines(items, tok)
    tok.counted.clear()
    packed = pack_recalled(lines, 400, tok)
    assert 0 < len(packed.items) < len(items)
    block = render_recalled(list(packed.items))
    assert block is not None and packed.block == block
    assert tok.counted.count(block.content) == 1
    # The frame (role, opening, closing), each of the 7 dates, the block chosen (role, text).
    assert len(tok.counted) == 3 + 7 + 2


# --- counting messages ----------------------------------------------------------------------

messages = st.builds(
    lambda role, content, extra: Message.of(role, content, **extra),
    st.sampled_from(["user", "assistant", "system", "tool"]),
    st.none() | texts | st.lists(st.one_of(
        texts.map(lambda t: {"type": "text", "text": t}),
        st.just({"type": "image_url", "image_url": {"url": "https://example.com/a.png"}})),
        max_size=3),
    st.sampled_from([{}, {"name": "alice"}, {"tool_call_id": "c1"}, {"tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]))


@FAST
@given(st.lists(messages, max_size=10))
def test_count_each_is_count_message_of_each(batch):
    assert count_each(batch, WORDS) == tuple(count_message(m, WORDS) for m in batch)
    assert count_each(batch, O200K) == tuple(count_message(m, O200K) for m in batch)


def test_a_longer_history_costs_the_rewrite_one_count_per_message_more():
    """Only the newest turns are looked at beyond counting each message once."""

    def counts(n_turns: int) -> int:
        history = tuple(Message.of("user" if i % 2 == 0 else "assistant", f"message {i} " * 30)
                        for i in range(n_turns))
        tok = RecordingTokenizer()
        rewrite(RewriteRequest(instructions=(Message.of("system", "be brief"),),
                               history=history, current=(Message.of("user", "now"),),
                               policy=ContextPolicy(max_context_tokens=500,
                                                    reserve_completion_tokens=0)), tok)
        return len(tok.counted)

    assert counts(300) - counts(50) == 250


@given(st.text(alphabet=st.sampled_from("ab \n\r\t\u00a0\u2028\u3000\x1c\x0b-"), max_size=40))
@example(" a \n\n b \r\n\tc ")
def test_one_line_is_its_regular_expression(text):
    """`one_line` by string methods is the substitution it is defined as."""
    assert one_line(text) == re.sub(r"\s*\n\s*", " ", text.strip())


# --- large items last ----------------------------------------------------------------------


def turn_item(n: int, words: int) -> Recollection:
    return Recollection(kind="turn", id=f"t{n}", text=f"turn {n} " + "w " * words,
                        source_ids=(f"s{n}",), position=n, score=1.0 / (n + 1))


def test_with_large_last_an_item_over_half_the_room_is_tried_after_the_others():
    items = [turn_item(0, 20), turn_item(1, 70), turn_item(2, 30), turn_item(3, 30)]
    lines = recalled_lines(items, WORDS)
    limit = 120  # the 70-word item takes more than half of it
    in_rank = pack_recalled(lines, limit, WORDS)
    large_last = pack_recalled(lines, limit, WORDS, large_last=True)
    assert [r.id for r in in_rank.items] == ["t0", "t1"]
    assert [r.id for r in large_last.items] == ["t0", "t2", "t3"]
    assert large_last.cost <= limit
    # room enough for all: the same block either way
    assert pack_recalled(lines, 400, WORDS, large_last=True) == pack_recalled(lines, 400, WORDS)


def test_the_stepped_tail_tries_its_large_items_last_unless_asked_what_the_assistant_said():
    history = tuple(Message.of("user" if i % 2 == 0 else "assistant", f"message {i} " + "h " * 60)
                    for i in range(40))
    items = (turn_item(0, 20), turn_item(1, 150), turn_item(2, 30), turn_item(3, 30))
    policy = ContextPolicy(max_context_tokens=700, reserve_completion_tokens=200,
                           assembly="stepped")  # ~200 tokens for the block: not all four

    def recalled_ids(question: str) -> tuple[str, ...]:
        out = rewrite(RewriteRequest((), history, (Message.of("user", question),), policy,
                                     MemoryContext(recalled=items)), WORDS)
        return out.recalled_ids

    assert recalled_ids("What did I plan for the garden?") == ("t0", "t2", "t3")
    assert recalled_ids("What did you recommend for the garden?") == ("t0", "t1")
