"""The large-request benchmark's arguments (bench/large_request.py): a run whose resends would
grow past the gateway's message limit is refused before anything starts, naming the limit."""

from __future__ import annotations

import json

import pytest

from bench.large_request import MAX_MESSAGES, body_for, large_history, parse_args


def test_the_default_run_stays_within_the_message_limit():
    args = parse_args([])
    assert args.messages + 1 + 2 * args.windows * args.large_per_window <= MAX_MESSAGES


def test_a_run_whose_last_resend_exceeds_the_limit_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--windows", "6"])  # 2,001 + 1 + 2 * 6 * 4 = 2,050 messages
    assert exit_.value.code == 2
    assert "2,050 messages" in capsys.readouterr().err


def test_the_largest_allowed_run_sends_exactly_the_limit():
    args = parse_args(["--messages", str(MAX_MESSAGES - 1 - 8), "--windows", "1"])
    history = large_history(args.messages, 0.2)
    for n in range(args.large_per_window):
        history += [{"role": "assistant", "content": "ok"},
                    {"role": "user", "content": f"step {n}"}]
    assert len(json.loads(body_for("chat", history))["messages"]) == MAX_MESSAGES
