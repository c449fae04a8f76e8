"""Parsing and validating a chat completion request body into typed values.

Every field OpenAI defines is checked for its JSON type before anything uses it
(gateway/pipeline/chat_fields.py); what the gateway itself relies on (model, messages, stream,
ids) is parsed into typed values, every other field is kept as sent and passed upstream
untouched. Problems raise `BadRequest` naming the offending parameter, so the client gets a
400 in OpenAI's error shape and never a 500.
"""

from __future__ import annotations

import json
import math
import re
from json.decoder import scanstring as _scanstring
from dataclasses import dataclass, field
from typing import Any, Callable

import orjson

from gateway.config import RequestLimitsConfig
from gateway.core.messages import ROLES, Message
from gateway.core.one_shot import MARKER
from gateway.core.context.pinned import MARKER as PIN_MARKER
from gateway.errors import BadRequest
from gateway.ports import NativeRequest
from gateway.pipeline.chat_fields import check_body_fields, check_message_fields, check_part

# Fields the gateway consumes; they are not forwarded upstream.
GATEWAY_FIELDS = ("conversation_id",)


@dataclass(frozen=True, slots=True)
class ChatRequest:
    model: str
    messages: tuple[Message, ...]
    stream: bool
    conversation_id: str | None
    user: str | None
    passthrough: dict[str, Any]
    """Every other field of the body, forwarded as sent (temperature, tools, ...)."""
    one_shot: frozenset[int] = frozenset()
    """Indexes into `messages` of those the client marked one-shot (gateway/core/one_shot.py);
    the marker itself is consumed here and never forwarded."""
    pinned: frozenset[int] = frozenset()
    """Indexes into `messages` of those the client pinned (gateway/core/context/pinned.py); likewise
    consumed here."""
    reply_form: Callable[[Message], Message] | None = field(default=None, compare=False)
    """How the client's dialect sends a reply back (None: as the chat API returned it); the
    reply is recorded in that form (gateway/core/dialects/)."""
    native: NativeRequest | None = field(default=None, compare=False)
    """The client's request in its own dialect, for an upstream that speaks it (the Messages
    door sets it; gateway/upstream/direct_anthropic.py)."""

    instructions: tuple[Message, ...] = field(init=False, repr=False, compare=False)
    """The client's system/developer messages, in order."""
    incoming: tuple[Message, ...] = field(init=False, repr=False, compare=False)
    """Every other message: the conversation as this client sends it."""

    def __post_init__(self) -> None:
        # Split once: the pipeline reads both several times, for up to thousands of messages.
        instructions, incoming = [], []
        for m in self.messages:
            (instructions if m.is_instruction else incoming).append(m)
        object.__setattr__(self, "instructions", tuple(instructions))
        object.__setattr__(self, "incoming", tuple(incoming))


MAX_JSON_DEPTH = 100
"""Deepest nesting of arrays and objects a body may have. Real requests (tool schemas
included) stay far below; deeper bodies are refused before anything recurses over them."""
_WHITESPACE = re.compile(r"[ \t\n\r]*")
"""JSON's whitespace (json.decoder's own pattern)."""
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
"""A `bytes.translate` table: every ASCII digit to "0", every other byte to a space."""
_NINETEEN_DIGITS = b"0" * 19
"""The shortest run of digits that can spell an integer past 64 bits."""


def parse_body(raw: bytes, *, in_pieces: bool = False) -> dict[str, Any]:
    """The body as a JSON object of well-formed Unicode, or `BadRequest`. `in_pieces`: parse
    it a value at a time (`_loads_in_pieces`: the same result), for a large body parsed on a
    worker thread, so that thread can hand the interpreter back between pieces.

    A lone UTF-16 surrogate (`"\\ud800"`, typically an emoji cut in half by a client that
    truncates JavaScript strings) is valid JSON but not text: it cannot be encoded as UTF-8,
    so neither the store nor the reply could carry it. It is replaced by U+FFFD, the
    replacement character every UTF-8 decoder uses for broken input: the request goes through
    and its turn is recorded, the same way on every resend (so transcripts still match).
    """
    if not in_pieces:
        body = _loads_exactly_by_orjson(raw)
        if body is not None:
            _check_depth(body)
            return body
    try:
        # Decoded here, strictly: json.loads(bytes) would also take UTF-16/32 and let
        # encoded surrogates through ('surrogatepass').
        text = raw.decode("utf-8-sig")
        body = _loads_in_pieces(text) if in_pieces else _loads(text)
    except ValueError as exc:  # decoding, syntax, an integer of more than 4,300 digits
        raise BadRequest(f"The request body is not valid JSON: {exc}", code="invalid_json")
    except RecursionError:  # the C parser recurses once per level
        raise BadRequest(f"The request body nests deeper than {MAX_JSON_DEPTH} levels.",
                         code="invalid_json") from None
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.", code="invalid_json")
    _check_depth(body)
    # Strict UTF-8 cannot hold a surrogate, only a \u escape can.
    if _SURROGATE_ESCAPE.search(text):
        body = _replace_surrogates(body)
    return body


def _loads(text: str) -> Any:
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite)


def _loads_exactly_by_orjson(raw: bytes) -> dict[str, Any] | None:
    """The body as `parse_body` reads it, by orjson, or None where orjson cannot say the
    same: orjson refuses everything `_loads` refuses (invalid UTF-8, NaN, 1e999, a trailing
    comma) and more (a byte order mark, a lone surrogate escape), and those bodies are left
    to `_loads` for its own error or repair; so is a body that is not an object, and one
    with a run of 19 or more digits anywhere, where an integer past 64 bits may be (orjson
    reads it as a float, `json` exactly)."""
    if _NINETEEN_DIGITS in raw.translate(_DIGITS_AS_ZERO):
        return None
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return body if type(body) is dict else None


class _NotInPieces(Exception):
    """The text is not a JSON object `_loads_in_pieces` can walk: `_loads` decides."""


def _loads_in_pieces(text: str) -> Any:
    """`_loads(text)`, the top-level object's values parsed one at a time and an array value
    one element at a time (a request's messages), by the same C scanner `json.loads` uses.
    Between pieces Python code runs, so a thread parsing a large body can hand the GIL to the
    event loop; one call of `json.loads` holds it for the whole body. Anything unexpected
    (not an object, a syntax error, a refused constant) is left to `_loads`, so errors are
    exactly `json.loads`'s."""
    try:
        return _walk_object(text)
    except (_NotInPieces, ValueError, StopIteration, RecursionError, BadRequest):
        return _loads(text)


def _walk_object(text: str) -> dict[str, Any]:
    scan = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite).scan_once
    space = _WHITESPACE.match
    i = space(text, 0).end()
    if text[i:i + 1] != "{":
        raise _NotInPieces
    i = space(text, i + 1).end()
    body: dict[str, Any] = {}
    if text[i:i + 1] == "}":
        i += 1
    else:
        while True:
            if text[i:i + 1] != '"':
                raise _NotInPieces
            key, i = _scanstring(text, i + 1, True)
            i = space(text, i).end()
            if text[i:i + 1] != ":":
                raise _NotInPieces
            i = space(text, i + 1).end()
            if text[i:i + 1] == "[":
                value, i = _walk_array(text, i + 1, scan, space)
            else:
                value, i = scan(text, i)
            body[key] = value  # a repeated key: the last value, at the first place (as json)
            i = space(text, i).end()
            if text[i:i + 1] == ",":
                i = space(text, i + 1).end()
            elif text[i:i + 1] == "}":
                i += 1
                break
            else:
                raise _NotInPieces
    if space(text, i).end() != len(text):
        raise _NotInPieces
    return body


def _walk_array(text: str, i: int, scan: Callable[[str, int], tuple[Any, int]],
                space: Callable[..., Any]) -> tuple[list[Any], int]:
    items: list[Any] = []
    i = space(text, i).end()
    if text[i:i + 1] == "]":
        return items, i + 1
    while True:
        item, i = scan(text, i)
        items.append(item)
        i = space(text, i).end()
        if text[i:i + 1] == ",":
            i = space(text, i + 1).end()
        elif text[i:i + 1] == "]":
            return items, i + 1
        else:
            raise _NotInPieces


def _no_constant(name: str) -> Any:
    # NaN and Infinity are not JSON; Python accepts them, the upstream and our replies would not.
    raise BadRequest(f"The request body is not valid JSON: `{name}` is not a JSON value.",
                     code="invalid_json")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # 1e999: parsed as infinity, which no JSON encoder writes back
        raise BadRequest(f"The request body is not valid JSON: {text[:40]} is out of range.",
                         code="invalid_json")
    return value


def _check_depth(body: Any) -> None:
    if _deeper_than(body, MAX_JSON_DEPTH):
        raise BadRequest(f"The request body nests deeper than {MAX_JSON_DEPTH} levels.",
                         code="invalid_json")


def _deeper_than(value: dict[str, Any] | list[Any], levels: int) -> bool:
    """Whether the container `value` nests more than `levels` deep (itself is one level).
    Recursive, at most `levels` + 1 calls deep; a call per container, none per string."""
    if levels <= 0:
        return True
    for child in value.values() if type(value) is dict else value:
        kind = type(child)
        if (kind is dict or kind is list) and _deeper_than(child, levels - 1):
            return True
    return False


def _replace_surrogates(value: Any) -> Any:
    """A copy with every lone surrogate replaced (depth already bounded)."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_replace_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_replace_surrogates(k): _replace_surrogates(v) for k, v in value.items()}
    return value


def parse_chat_request(body: dict[str, Any], limits: RequestLimitsConfig) -> ChatRequest:
    """The typed request, or `BadRequest` naming the field at fault. The tenant's `limits`
    cost one `len` each: the message count is checked before any message is parsed, and a
    message's length before it is copied."""
    model = body.get("model")
    if type(model) is not str or not model:
        raise BadRequest("`model` is required and must be a non-empty string.", param="model")
    messages = body.get("messages")
    if type(messages) is not list or not messages:
        raise BadRequest("`messages` is required and must be a non-empty array.",
                         param="messages")
    if len(messages) > limits.max_messages:
        # OpenAI's own wording and code for the same limit.
        raise BadRequest(f"Invalid 'messages': array too long. Expected an array with maximum "
                         f"length {limits.max_messages}, but got an array with length "
                         f"{len(messages)} instead.", param="messages",
                         code="array_above_max_length")
    check_body_fields(body)  # stream, user, conversation_id among them
    stream = body.get("stream") or False
    conversation_id = body.get("conversation_id")
    user = body.get("user")
    passthrough = {k: v for k, v in body.items()
                   if k not in ("model", "messages", *GATEWAY_FIELDS)}
    max_chars = limits.max_message_chars
    parsed = tuple(_message(m, i, max_chars) for i, m in enumerate(messages))
    # Markers are extra keys: a message of two keys (role and content) has none.
    marked = [(i, m) for i, m in enumerate(messages) if len(m) > 2]
    one_shot = frozenset(i for i, m in marked if m.get(MARKER) is True)
    pinned = frozenset(i for i, m in marked if m.get(PIN_MARKER) is True)
    if one_shot & pinned:
        i = min(one_shot & pinned)
        # One-shot content is never stored; a pin is kept for good: the client must choose.
        raise BadRequest(f"`messages[{i}]` cannot be both one-shot and pinned.",
                         param=f"messages[{i}].{PIN_MARKER}")
    return ChatRequest(model=model, messages=parsed, stream=stream,
                       conversation_id=conversation_id, user=user, passthrough=passthrough,
                       one_shot=one_shot, pinned=pinned)


def _text_length(content: Any) -> int:
    """Characters of a (validated) content: the string, or its text parts together."""
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(len(part["text"]) for part in content if part["type"] == "text")
    return 0


def _message(data: Any, index: int, max_chars: int) -> Message:
    if type(data) is dict and len(data) == 2:
        # The common message, `{"role": ..., "content": "..."}`: nothing else to check or to
        # freeze (a tool message needs its `tool_call_id`: the checks below refuse it).
        role, content = data.get("role"), data.get("content")
        # (`type(role) is str` first: a list or object as the role is unhashable.)
        if type(content) is str and type(role) is str and role in ROLES and role != "tool" \
                and len(content) <= max_chars:
            return Message.plain(role, content)
    where = f"messages[{index}]"
    if not isinstance(data, dict):
        raise BadRequest(f"`{where}` must be an object.", param=where)
    role = data.get("role")
    if type(role) is not str or role not in ROLES:
        shown = repr(role) if type(role) is str else "a value of another type"
        raise BadRequest(f"`{where}.role` must be a string, one of "
                         f"{', '.join(sorted(ROLES))}; got {shown[:80]}.",
                         param=f"{where}.role")
    check_message_fields(data, where)
    content = data.get("content")
    if content is None:
        if role not in ("assistant", "function") or not (data.get("tool_calls")
                                                          or data.get("function_call")):
            raise BadRequest(f"`{where}.content` is required.", param=f"{where}.content")
    elif type(content) is list:
        for j, part in enumerate(content):
            check_part(part, f"{where}.content[{j}]")
    elif type(content) is not str:
        raise BadRequest(f"`{where}.content` must be a string or an array of content parts.",
                         param=f"{where}.content")
    chars = _text_length(content)
    if chars > max_chars:
        raise too_long(f"{where}.content", chars, max_chars)
    if role == "tool" and "tool_call_id" not in data:  # (its type: checked above)
        raise BadRequest(f"`{where}.tool_call_id` is required for tool messages.",
                         param=f"{where}.tool_call_id")
    if MARKER in data or PIN_MARKER in data:
        for marker in (MARKER, PIN_MARKER):
            if marker in data and not isinstance(data[marker], bool):
                raise BadRequest(f"`{where}.{marker}` must be a boolean.",
                                 param=f"{where}.{marker}")
        data = {k: v for k, v in data.items() if k != MARKER and k != PIN_MARKER}
    return Message.from_openai(data)


def too_long(param: str, chars: int, max_chars: int) -> BadRequest:
    """The tenant's `request_limits.max_message_chars` exceeded at `param`, in OpenAI's own
    wording and code for a string over its length."""
    return BadRequest(f"Invalid '{param}': string too long. Expected a string with maximum "
                      f"length {max_chars}, but got a string with length {chars} instead.",
                      param=param, code="string_above_max_length")
