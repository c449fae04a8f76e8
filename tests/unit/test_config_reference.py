"""docs/configuration.md is the one place the config's defaults are written down: every row of
its `| key | default | meaning |` tables must name a real key of the config model
(gateway/config/) and state that key's default as the model has it, and every key an operator
can set must have a row. Pure: reads the doc and the model, nothing else."""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from gateway.config import Config

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"

REQUIRED = "required"
"""What the default column says for a key without a default."""

NOT_LISTED = {
    "tenants.<name>.request_limits.max_messages":
        "the same keys as the top-level request_limits, documented once there; the row "
        "`tenants.<name>.request_limits` says a tenant's keys override them",
    "tenants.<name>.request_limits.max_message_chars": "as above",
    "tenants.<name>.request_limits.max_stored_messages": "as above",
}
"""Keys an operator can set that have no row of their own, with the reason."""

_PLACEHOLDER = re.compile(r"<[A-Za-z_]+>")


# -- the model ---------------------------------------------------------------------------

def _nested(annotation: Any) -> tuple[str | None, type[BaseModel] | None]:
    """('model' | 'dict' | 'list', the model) when the annotation holds a config model — as
    itself, optional, or as the values of a dict or the items of a list; (None, None) for a
    leaf."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "model", annotation
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            kind, model = _nested(arg)
            if kind is not None:
                return kind, model
        return None, None
    if origin is dict and len(args) == 2 and _nested(args[1])[0] == "model":
        return "dict", _nested(args[1])[1]
    if origin is list and args and _nested(args[0])[0] == "model":
        return "list", _nested(args[0])[1]
    return None, None


def _fields(model: type[BaseModel] = Config, prefix: str = "") -> dict[str, Any]:
    """Every field of the config, nested ones included, by dotted key (`<name>` for a dict's
    keys, `<i>` for a list's items) -> its pydantic FieldInfo."""
    found: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        key = prefix + name
        found[key] = info
        kind, sub = _nested(info.annotation)
        if kind == "model":
            found.update(_fields(sub, key + "."))
        elif kind == "dict":
            found.update(_fields(sub, key + ".<name>."))
        elif kind == "list":
            found.update(_fields(sub, key + ".<i>."))
    return found


FIELDS = _fields()
LEAVES = {key for key, info in FIELDS.items() if _nested(info.annotation)[0] is None}


def _canonical(key: str) -> str:
    """The doc may name a placeholder as it reads best (`<alias>`, `<tenant>`): compare on
    `<name>` / `<i>` by where the model has a dict or a list."""
    parts, out = key.split("."), []
    for part in parts:
        if _PLACEHOLDER.fullmatch(part):
            parent = ".".join(out)
            kind = _nested(FIELDS[parent].annotation)[0] if parent in FIELDS else None
            out.append("<i>" if kind == "list" else "<name>")
        else:
            out.append(part)
    return ".".join(out)


def render(value: Any) -> str:
    """A Python default as YAML shows it (what the doc's default column holds, in backticks)."""
    if isinstance(value, Path):
        text = str(value)
        return text if value.is_absolute() or text.startswith(".") else f"./{text}"
    if isinstance(value, BaseModel):
        raise TypeError("a section's default is its keys' defaults: document the keys")
    dumped = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True)
    return dumped.removesuffix("\n...\n").strip()


def _default(info: Any) -> str:
    if info.is_required():
        return REQUIRED
    if info.default_factory is not None:
        return render(info.default_factory())
    return render(info.default)


# -- the doc -----------------------------------------------------------------------------

def doc_rows(text: str) -> list[tuple[int, str, str]]:
    """(line number, key, default as written) of every row of a `| key | default | meaning |`
    table."""
    rows, in_table = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if not line.startswith("|"):
            in_table = False
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if cells[:3] == ["key", "default", "meaning"]:
            in_table = True
        elif in_table and not set(line) <= set("|-: "):
            key = re.fullmatch(r"`([^`]+)`", cells[0])
            # A key not in backticks is reported as a key the model does not have.
            rows.append((number, key.group(1) if key else cells[0],
                         cells[1] if len(cells) > 1 else ""))
    return rows


def _stated(default: str) -> str:
    """The default column's text: `value` in backticks, or the word `required`."""
    if default == REQUIRED:
        return REQUIRED
    match = re.fullmatch(r"`([^`]*)`", default)
    return match.group(1) if match else f"<not in backticks: {default}>"


ROWS = doc_rows(DOC.read_text(encoding="utf-8"))


def check(rows: list[tuple[int, str, str]]) -> list[str]:
    """Every way the rows disagree with the model, one line each (empty: they agree)."""
    problems: list[str] = []
    seen: dict[str, int] = {}
    for number, key, default in rows:
        where = f"docs/configuration.md:{number}: `{key}`"
        canonical = _canonical(key)
        if canonical not in FIELDS:
            problems.append(f"{where}: no such key in the config model")
            continue
        if canonical in seen:
            problems.append(f"{where}: stated twice (also line {seen[canonical]})")
        seen[canonical] = number
        try:
            expected = _default(FIELDS[canonical])
        except TypeError as exc:
            problems.append(f"{where}: {exc}")
            continue
        if _stated(default) != expected:
            shown = expected if expected == REQUIRED else f"`{expected}`"
            problems.append(f"{where}: the doc says {default}, the model's default is {shown}")
    for key in sorted(LEAVES - set(seen) - set(NOT_LISTED)):
        problems.append(f"docs/configuration.md: `{key}` is not documented")
    return problems


def test_the_doc_has_the_tables():
    assert len(ROWS) > 50


def test_every_row_names_a_key_and_its_default_and_every_key_has_a_row():
    assert check(ROWS) == []


def test_exceptions_are_real_keys_without_a_row():
    documented = {_canonical(key) for _, key, _ in ROWS}
    for key in NOT_LISTED:
        assert key in LEAVES, key
        assert key not in documented, f"{key} has a row now: drop it from NOT_LISTED"


# -- the check itself can fail -----------------------------------------------------------

def _changed(key: str, default: str) -> list[tuple[int, str, str]]:
    return [(n, k, default if k == key else d) for n, k, d in ROWS]


@pytest.mark.parametrize("key, default", [
    ("server.port", "`8081`"),
    ("tenants.<name>.context.summary_share", "`0.1`"),
    ("tenants.<name>.context.recall_share", "`0.8`"),
    ("tenants.<name>.context.one_shot_tool_chars", "`null`"),
    ("server.data_dir", "`./store`"),
    ("tenants.<name>.memory.topics.enabled", "`false`"),
    ("tenants.<name>.models.<alias>.model", "`null`"),
    ("admin.keys", "`{}`"),
    ("server.host", "127.0.0.1"),
])
def test_a_wrong_default_is_caught(key, default):
    assert any(k == key for _, k, _ in ROWS), key
    problems = check(_changed(key, default))
    assert len(problems) == 1 and f"`{key}`" in problems[0], problems


def test_an_unknown_key_and_a_missing_key_are_caught():
    rows = [(n, "server.portt" if k == "server.port" else k, d) for n, k, d in ROWS]
    problems = check(rows)
    assert any("server.portt" in p and "no such key" in p for p in problems), problems
    assert any("`server.port` is not documented" in p for p in problems), problems


def test_a_key_stated_twice_is_caught():
    problems = check(ROWS + [(0, "server.port", "`8080`")])
    assert any("stated twice" in p for p in problems), problems


@pytest.mark.parametrize("value, shown", [
    (None, "null"), (True, "true"), (False, "false"), (8080, "8080"), (2.0, "2.0"),
    (0.05, "0.05"), ("127.0.0.1", "127.0.0.1"), ("X-User-Id", "X-User-Id"), ([], "[]"),
    ({}, "{}"), (Path("./data"), "./data"), (Path("/srv/gw"), "/srv/gw"),
])
def test_render(value, shown):
    assert render(value) == shown
