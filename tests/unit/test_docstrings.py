"""Product docstrings say what the code does and its invariants, not what a benchmark measured:
the why-and-measured lives in docs/decisions.md (a dated entry with the command) or
bench/NOTEBOOK.md, and a docstring may point there in one line.

Every docstring of every module under gateway/ is read with `ast`: module, class and function
docstrings and the attribute docstrings (a string statement after an assignment or a field).
A **measured figure** is any of:

- a score to three or more decimals (`0.898`): benchmark scores, evidence recall;
- a duration in milliseconds or microseconds (`2.5 ms`, `20 µs`): timings;
- a rate per second (`750 sentences/s`, `~40/s`, `1,050 turns/s`): throughputs;
- a ratio written with `×` (`1.15×`): before/after comparisons;
- an approximate time, share or ratio (`~1 s`, `~3 %`, `~1.3x`): what a run observed;
- a range of seconds (`2.5-2.9 s`): what several runs observed;
- a percentage (`16-37 % less`) — not URL escapes such as `%E5`;
- a report of a measurement: "measured on/with/in" followed by what it was measured on,
  "(measured".

Not figures: defaults and limits ("60 s", "20 s", "5 ms by default", `0.5` in an invariant),
thresholds with two decimals, RFC and version numbers, sizes of a format ("4 MiB") and sizes
worked out by arithmetic ("a 128k-token history is ~0.6 MB"), and "measured" in the sense of
counting tokens ("measured as rendered") or of a clock ("the seconds it is measured on (…)").
Pure: reads files."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "gateway"

_NUMBER = r"\d[\d,]*(?:\.\d+)?"
MEASURED = {
    "score to three decimals": re.compile(r"(?<![\w.])0\.\d{3,}\b"),
    "duration in ms or µs": re.compile(rf"{_NUMBER}\s?(?:ms|µs)\b"),
    "rate per second": re.compile(rf"{_NUMBER}\s?[A-Za-z]*/s\b"),
    "ratio": re.compile(rf"{_NUMBER}\s?×"),
    "approximate quantity": re.compile(
        rf"~\s?{_NUMBER}(?:\s?[-–]\s?{_NUMBER})?\s?(?:s|ms|µs|%|×|x)(?![\w/])"),
    "range of seconds": re.compile(rf"{_NUMBER}\s?[-–]\s?{_NUMBER}\s?s\b"),
    "percentage": re.compile(r"\d\s?%(?![0-9A-Fa-f]{2})"),
    "measurement report": re.compile(r"\bmeasured (?:on|with|in)(?= [\w`\"'-])|\(measured\b", re.I),
}
"""What counts as a measured figure (see the module docstring), by name."""
_DEFAULT = re.compile(r"\bdefaults?\b", re.I)
"""Near a duration, the word that makes it a setting ("5 ms by default", "default: 50 ms")."""


def docstrings(tree: ast.AST):
    """(line, text) of every string statement in a body: the docstrings of modules, classes and
    functions, and attribute docstrings."""
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not isinstance(body, list):
                continue
            for statement in body:
                if (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
                        and isinstance(statement.value.value, str)):
                    yield statement.lineno, statement.value.value


def figures(text: str, first_line: int = 1) -> list[tuple[int, str, str]]:
    """(line, kind, match) of every measured figure in a docstring starting at `first_line`."""
    found = []
    for offset, line in enumerate(text.splitlines()):
        for kind, pattern in MEASURED.items():
            for match in pattern.finditer(line):
                near = line[max(0, match.start() - 12):match.end() + 14]
                if kind == "duration in ms or µs" and _DEFAULT.search(near):
                    continue
                found.append((first_line + offset, kind, match.group(0)))
    return found


def measured_figures(root: Path = PRODUCT) -> list[str]:
    """`file:line: kind 'figure'` for every measured figure in a docstring under `root`."""
    problems = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, text in docstrings(tree):
            for at, kind, figure in figures(text, line):
                problems.append(f"{path.relative_to(ROOT)}:{at}: {kind} {figure!r}")
    return problems


def test_no_product_docstring_quotes_a_measured_figure():
    problems = measured_figures()
    assert problems == [], ("move the why-and-measured to docs/decisions.md or "
                            "bench/NOTEBOOK.md, leaving a one-line pointer:\n"
                            + "\n".join(problems))


# -- the check itself can fail, and passes what is not a measurement ----------------------

@pytest.mark.parametrize("text, kind", [
    ("keeps 0.898 of the evidence against 0.900", "score to three decimals"),
    ("a lookup takes 0.11 ms at 600 messages", "duration in ms or µs"),
    ("a cut of a 50-character run takes 20 µs", "duration in ms or µs"),
    ("embeds ~750 sentences/s at batch 1", "rate per second"),
    ("threads=2 gives ~40/s", "rate per second"),
    ("applies 1,050 turns/s", "rate per second"),
    ("300 turns cost 1.15× what 50 cost", "ratio"),
    ("loads offline in ~1 s", "approximate quantity"),
    ("a batch is ~1.3x-2.5x faster per sentence", "approximate quantity"),
    ("the import takes ~2–4 s", "approximate quantity"),
    ("6 facts cost ~3 % of the budget", "approximate quantity"),
    ("took 2.5-2.9 s to export", "range of seconds"),
    ("costs 16-37 % less", "percentage"),
    ("Costs (measured on the 2-core machine)", "measurement report"),
    ("The threshold, measured with this model", "measurement report"),
])
def test_a_measured_figure_is_caught(text, kind):
    assert kind in {found_kind for _, found_kind, _ in figures(text)}


@pytest.mark.parametrize("text", [
    "Waits up to `pool_timeout` seconds (default: 20 s) for a connection.",
    "`slow` (2 s), `slow-<ms>` (e.g. `slow-250`): echo after a delay.",
    "0.6 separates a paraphrase from an unrelated sentence; a message below 0.3 leaves the topic.",
    "Scores equal bm25s's defaults (k1 1.5, b 0.75).",
    "RFC 5987 (`filename*=UTF-8''%E5%8C%97%E4%BA%AC%20%E5%A4%A9`).",
    "A body over 4 MiB is refused; a 300-turn conversation is one request.",
    "An import's body at most (a 128k-token history is ~0.6 MB).",
    "every `sys.getswitchinterval()` (5 ms by default): the loop waits that long.",
    "`gap_poll_ms` (default: 50 ms) between two reads of the stream.",
    "Each candidate is measured as rendered: the budget holds exactly what the tokenizer counts.",
    "Priced, not measured: the block costs exactly its price.",
    "`gap_clock`: the seconds `gap_timeout_ms` is measured on (a test steps it).",
    "Why this default: docs/decisions.md, \"Relevance floor and gate\".",
])
def test_what_is_not_a_measurement_passes(text):
    assert figures(text) == []


def test_every_kind_of_docstring_is_read(tmp_path):
    (tmp_path / "m.py").write_text(
        '"""Module: 0.898."""\n'
        'X = 1\n"""Attribute: ~1 s."""\n'
        'class C:\n    """Class: 5 ms."""\n'
        '    y: int = 2\n    """Field: 3×."""\n'
        '    def f(self):\n        """Function: 10 %."""\n', encoding="utf-8")
    tree = ast.parse((tmp_path / "m.py").read_text(encoding="utf-8"))
    assert sorted(line for line, _ in docstrings(tree)) == [1, 3, 5, 7, 9]
