"""Re-recording the golden files (tests/golden.py): a changed case is shown field by field and
message line by message line, and nothing is written without `--accept`."""

from __future__ import annotations

import json

from tests.golden import case_diffs, rerecord

OLD = {"words/1": {"digest": "aaa", "tokens_forwarded": 30, "memory_blocks": ["recalled"],
                   "messages": ["system instruction 5", "user verbatim 10",
                                "assistant verbatim 8", "system block:memory 4",
                                "user current 3"]},
       "words/2": {"digest": "bbb", "tokens_forwarded": 9, "memory_blocks": [],
                   "messages": ["user current 9"]}}
NEW = {"words/1": {"digest": "ccc", "tokens_forwarded": 24, "memory_blocks": ["recalled"],
                   "messages": ["system instruction 5", "user shortened 4",
                                "assistant verbatim 8", "system block:memory 4",
                                "user current 3"]},
       "words/2": OLD["words/2"]}


def test_a_changed_case_says_what_changed_and_an_unchanged_one_is_not_listed():
    lines = case_diffs(OLD, NEW)
    assert lines[0] == "words/1:"
    assert '  digest: "aaa" -> "ccc"' in lines and "  tokens_forwarded: 30 -> 24" in lines
    assert "    -user verbatim 10" in lines and "    +user shortened 4" in lines
    assert not any("words/2" in line or "memory_blocks" in line for line in lines)
    assert case_diffs(OLD, OLD) == []
    assert case_diffs(OLD, {"words/1": NEW["words/1"]})[-1] == "words/2: removed"


def test_nothing_is_written_without_accept(tmp_path):
    path = tmp_path / "golden.json"
    path.write_text(json.dumps(OLD))
    lines, changed = rerecord(path, NEW, accept=False)
    assert changed and json.loads(path.read_text()) == OLD
    assert lines[-1] == "golden.json: 2 cases: 1 differ, 1 of them in the digest (the " \
                        "rewrite's output), 0 in the readable fields only"
    lines, changed = rerecord(path, NEW, accept=True)
    assert changed and json.loads(path.read_text()) == NEW and lines[-1] == "golden.json: written"
    assert rerecord(path, NEW, accept=False) == (
        ["golden.json: 2 cases: 0 differ, 0 of them in the digest (the rewrite's output), "
         "0 in the readable fields only"], False)
