"""A large body parsed in pieces by `json` (`parse_body(raw, in_pieces=True)`) gives exactly
what the whole-body parse gives (orjson where it can say the same, else `json`): the same value
for every JSON object, the same error (type, message, code) for every other text."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import BadRequest
from gateway.pipeline.chat_request import parse_body

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)


def outcome(raw: bytes, in_pieces: bool) -> object:
    try:
        return ("ok", parse_body(raw, in_pieces=in_pieces))
    except BadRequest as exc:
        return ("error", exc.message, exc.code, exc.param)


@given(st.dictionaries(st.text(), JSON, max_size=6), st.sampled_from([None, 1, 2]),
       st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t")]))
def test_every_object_parses_to_the_same_value(body, indent, separators):
    raw = json.dumps(body, indent=indent, separators=separators).encode()
    assert outcome(raw, True) == outcome(raw, False) == ("ok", json.loads(raw))


@given(st.text(alphabet='{}[]",: \n0123456789.eEtrufalsn-\\a', max_size=40))
def test_any_text_gets_the_same_answer_either_way(text):
    raw = text.encode()
    assert outcome(raw, True) == outcome(raw, False)


@pytest.mark.parametrize("raw", [
    b'{"messages": [{"role": "user", "content": "hi"}], "model": "m"}',
    b'  {"a": [1, 2, [3, {"b": []}]], "a": {"x": "last wins"}, "c": [] }  ',
    b'{"messages": [1, 2,]}', b'{"messages": [NaN]}', b'{"t": 1e999}', b'[1, 2]', b'{"a": 1} x',
    b'\xef\xbb\xbf{"bom": true}', b'{"s": "\\ud800 lone"}', b'{"a": "\x01"}', b'{}', b'{"a":[]}',
    b'{"deep": ' + b'[' * 150 + b']' * 150 + b'}', b'{"n": ' + b'9' * 5000 + b'}',
    b'{"seed": 123456789012345678901234567890}', b'{"n": -9223372036854775809}',
    b'{"n": 18446744073709551616, "m": 1.5e300}', b'{"s": "id 12345678901234567890"}',
    b'{"s": "\\udc00 lone low", "t": "\\ud83d\\ude00 a pair"}', b'{"a": "\xff"}',
])
def test_edge_cases_get_the_same_answer_either_way(raw):
    assert outcome(raw, True) == outcome(raw, False)


@pytest.mark.parametrize("in_pieces", [True, False])
def test_a_repeated_key_keeps_its_first_place_and_its_last_value(in_pieces):
    parsed = parse_body(b'{"a": [1], "b": 2, "a": [3]}', in_pieces=in_pieces)
    assert list(parsed.items()) == [("a", [3]), ("b", 2)]


def test_an_integer_past_64_bits_stays_exact():
    assert parse_body(b'{"seed": 123456789012345678901234567890}') == {
        "seed": 123456789012345678901234567890}
