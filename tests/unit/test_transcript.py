"""Reconciling incoming messages with the stored transcript, and applying recorded turns."""

import pytest

from gateway.core.messages import Message, chain
from gateway.core.transcript import TurnRecord, apply_turn, reconcile


def u(text):
    return Message.of("user", text)


def a(text):
    return Message.of("assistant", text)


def stored_of(*messages):
    return chain(None, messages)


def record_and_apply(stored, incoming, reply):
    """What the gateway does for one request: reconcile, then apply the recorded turn."""
    rec = reconcile(incoming, stored)
    edit = apply_turn(stored, rec.record([reply]))
    return rec, edit.applied_to(stored), edit


HISTORY = (u("hi"), a("hello"), u("how are you"), a("fine"))


def test_first_request_of_a_conversation_is_all_new():
    rec = reconcile((u("hi"),), ())
    assert rec.kind == "new" and rec.new == (u("hi"),) and rec.conversation == (u("hi"),)


def test_stateless_client_appends_only_what_is_new():
    stored = stored_of(*HISTORY)
    rec, after, _ = record_and_apply(stored, HISTORY + (u("bye"),), a("see you"))
    assert rec.kind == "stateless"
    assert rec.new == (u("bye"),)
    assert [s.message for s in after] == list(HISTORY + (u("bye"), a("see you")))


def test_stateful_client_gets_the_stored_history_supplied():
    stored = stored_of(*HISTORY)
    rec, after, _ = record_and_apply(stored, (u("bye"),), a("see you"))
    assert rec.kind == "stateful" and rec.mode == "append"
    assert rec.conversation == HISTORY + (u("bye"),)
    assert [s.message for s in after] == list(HISTORY + (u("bye"), a("see you")))


def test_stateless_and_stateful_clients_see_the_same_conversation():
    stored = stored_of(*HISTORY)
    full = reconcile(HISTORY + (u("next"),), stored)
    only_new = reconcile((u("next"),), stored)
    assert full.conversation == only_new.conversation


def test_window_client_overlapping_the_stored_tail_is_a_continuation():
    stored = stored_of(*HISTORY)
    rec = reconcile((u("how are you"), a("fine"), u("next")), stored)
    assert rec.kind == "stateful"
    assert rec.new == (u("next"),)
    assert rec.conversation == HISTORY + (u("next"),)


def test_repeating_an_earlier_user_message_statefully_is_not_a_fork():
    stored = stored_of(*HISTORY)
    rec = reconcile((u("hi"),), stored)
    assert rec.kind == "stateful" and rec.conversation == HISTORY + (u("hi"),)


def test_edited_earlier_turn_forks_and_keeps_the_old_branch():
    stored = stored_of(*HISTORY)
    edited = (u("hi"), a("hello"), u("how old are you"))
    rec, after, edit = record_and_apply(stored, edited, a("ageless"))
    assert rec.kind == "fork"
    assert rec.conversation == edited  # the client's version wins for this request
    assert [s.message for s in after] == list(edited + (a("ageless"),))
    assert edit.keep == 2 and edit.archives(len(stored))  # the old tail is archived, not lost


def test_regenerate_branches_at_the_last_user_message():
    stored = stored_of(*HISTORY)
    rec, after, edit = record_and_apply(stored, HISTORY[:3], a("great"))
    assert rec.kind == "regenerate" and rec.new == ()
    assert [s.message for s in after] == list(HISTORY[:3] + (a("great"),))
    assert edit.keep == 3


def test_history_unrelated_to_the_stored_one_forks_at_the_root():
    stored = stored_of(*HISTORY)
    other = (u("new topic"), a("sure"), u("go on"))
    rec = reconcile(other, stored)
    assert rec.kind == "fork" and rec.parent_id is None and rec.conversation == other


def test_window_with_an_edit_forks_where_it_diverges():
    stored = stored_of(*HISTORY, u("q3"), a("a3"))
    window = (u("how are you"), a("fine!!"), u("q4"))
    rec = reconcile(window, stored)
    assert rec.kind == "fork"
    assert rec.conversation == HISTORY[:2] + window
    assert rec.parent_id == stored[2].id and rec.new == window[1:]


def test_retried_record_is_a_no_op():
    stored = stored_of(*HISTORY)
    rec = reconcile(HISTORY + (u("bye"),), stored)
    once = apply_turn(stored, rec.record([a("see you")])).applied_to(stored)
    twice = apply_turn(once, rec.record([a("see you")]))
    assert twice.append == () and twice.keep == len(once)


class _LastOnly(tuple):
    """A transcript that refuses to be read anywhere but at its end."""

    def __getitem__(self, index):
        if index not in (-1, len(self) - 1):
            raise AssertionError(f"read position {index}")
        return tuple.__getitem__(self, index)

    def __iter__(self):
        raise AssertionError("scanned the whole transcript")


def test_a_turn_that_follows_the_last_message_is_applied_without_scanning_the_transcript():
    # Every read of a conversation applies its pending turns on top of the transcript: each
    # must cost the same at 10 messages as at 10,000 (a lagging recorder leaves many).
    stored = stored_of(*HISTORY)
    turn = reconcile(HISTORY + (u("bye"),), stored).record([a("see you")])
    edit = apply_turn(_LastOnly(stored), turn)
    assert edit.keep == len(stored)
    assert [m.message.text for m in edit.append] == ["bye", "see you"]
    assert edit.append[0].parent_id == stored[-1].id


def test_stateless_turns_recorded_late_are_stored_once():
    # The client sends turn 2 before turn 1 was applied: both records start at the same parent.
    stored = stored_of(u("hi"), a("hello"))
    first = reconcile((u("hi"), a("hello"), u("q1")), stored).record([a("r1")])
    second = reconcile((u("hi"), a("hello"), u("q1"), a("r1"), u("q2")), stored).record([a("r2")])
    after_first = apply_turn(stored, first).applied_to(stored)
    after_both = apply_turn(after_first, second).applied_to(after_first)
    assert [s.message.text for s in after_both] == ["hi", "hello", "q1", "r1", "q2", "r2"]


def test_append_records_land_in_order_of_application():
    stored = stored_of(*HISTORY)
    one = TurnRecord("append", None, (u("x"), a("y")))
    two = TurnRecord("append", None, (u("z"), a("w")))
    after = apply_turn(stored, one).applied_to(stored)
    after = apply_turn(after, two).applied_to(after)
    assert [s.message.text for s in after][-4:] == ["x", "y", "z", "w"]


def test_record_whose_parent_was_archived_is_appended_not_lost():
    stored = stored_of(*HISTORY)
    orphan = TurnRecord("after", "not-on-this-branch", (u("late"), a("reply")))
    edit = apply_turn(stored, orphan)
    assert edit.keep == len(stored) and [s.message.text for s in edit.append] == ["late", "reply"]


def test_incomplete_reply_is_marked():
    rec = reconcile((u("hi"),), ())
    edit = apply_turn((), rec.record([a("par")], incomplete_reply=True))
    assert [s.incomplete for s in edit.append] == [False, True]


@pytest.mark.parametrize("content", [
    "plain", [{"type": "text", "text": "part"}, {"type": "image_url", "image_url": {"url": "x"}}],
])
def test_message_round_trips_through_openai_shape(content):
    data = {"role": "user", "content": content, "name": "ann"}
    message = Message.from_openai(data)
    assert message.to_openai() == data
    assert Message.from_openai(message.to_openai()) == message


def test_chain_ids_depend_on_parent_and_content():
    one = chain(None, (u("a"), u("b")))
    again = chain(None, (u("a"), u("b")))
    other_parent = chain("x", (u("a"), u("b")))
    assert [s.id for s in one] == [s.id for s in again]
    assert one[0].id != other_parent[0].id and one[1].parent_id == one[0].id


def test_concurrent_first_messages_of_a_stateful_client_all_land():
    # Both requests saw an empty conversation; neither may fork the other away.
    one, two = reconcile((u("x"),), ()), reconcile((u("y"),), ())
    after = apply_turn((), one.record([a("rx")])).applied_to(())
    after = apply_turn(after, two.record([a("ry")])).applied_to(after)
    assert [s.message.text for s in after] == ["x", "rx", "y", "ry"]


def test_first_request_with_history_is_pinned_to_the_start():
    rec = reconcile(HISTORY, ())
    assert rec.mode == "after" and rec.parent_id is None
    twice = apply_turn(stored_of(*HISTORY), rec.record([]))
    assert twice.append == ()  # a resent first request is not stored again


@pytest.mark.parametrize("incoming", [
    (u("x"),),                                   # stateful, no overlap
    HISTORY + (u("x"),),                         # stateless continuation
    (u("how are you"), a("fine"), u("x")),       # window overlapping the tail
    (u("hi"), a("hello"), u("changed")),         # fork at a prefix
    (u("how are you"), a("fine!!"), u("x")),     # window fork
    (u("new"), a("topic"), u("x")),              # fork at the root
])
def test_conversation_ids_name_the_stored_messages_of_the_conversation(incoming):
    stored = stored_of(*HISTORY)
    by_id = {s.id: s.message for s in stored}
    rec = reconcile(incoming, stored)
    assert len(rec.conversation_ids) == len(rec.conversation)
    for message, mid in zip(rec.conversation, rec.conversation_ids):
        if mid is not None:
            assert by_id[mid] == message
    assert rec.conversation_ids[-1] is None  # the client's new message is not stored yet


def test_a_reply_resent_as_the_sdk_returned_it_is_the_stored_reply():
    stored = chain(None, (u("hi"), Message.from_openai({"role": "assistant", "content": "hello"})))
    as_returned = Message.from_openai({"role": "assistant", "content": "hello", "refusal": None,
                                       "annotations": [], "tool_calls": None, "audio": None})
    rec = reconcile((u("hi"), as_returned, u("next")), stored)
    assert rec.kind == "stateless" and rec.new == (u("next"),)
    assert apply_turn(stored, rec.record([a("r")])).keep == 2  # no fork


@pytest.mark.parametrize("x, y", [
    ({"role": "assistant", "content": "hi"}, {"role": "assistant", "content": "hi", "refusal": None}),
    ({"role": "assistant", "content": "hi"}, {"role": "assistant", "content": "hi", "annotations": []}),
    ({"role": "user", "content": "a"}, {"role": "user", "content": "b"}),
    ({"role": "user", "content": "a"}, {"role": "assistant", "content": "a"}),
    ({"role": "user", "content": "a", "name": "x"}, {"role": "user", "content": "a"}),
    ({"role": "user", "content": [{"type": "text", "text": "a"}]}, {"role": "user", "content": "a"}),
])
def test_message_key_and_canonical_text_agree(x, y):
    mx, my = Message.from_openai(x), Message.from_openai(y)
    assert (mx.key() == my.key()) == (mx.canonical() == my.canonical())
