"""The shapes of conversation the memory benchmarks report side by side (issue 24): LoCoMo's
two friends in short English turns, and MemoryBank's user–assistant chats in English and in
Chinese (the same content), each at the budgets that matter for its length — LoCoMo's ~22k
tokens at 2,000, MemoryBank's 3–5k at 500 and 1,000.

A shape on the command line is `PATH[@B1,B2]`: a LoCoMo-schema file and its own budgets
(without them, the command's `--budgets`). The files are read where they are (by default the
`shared/bench-data/` folder beside the checkout), never copied into the repository.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

DATA_DIR = Path(__file__).resolve().parents[3] / "shared" / "bench-data"
NAMES = {"locomo-dev": "LoCoMo dev", "memorybank-en-dev": "MemoryBank-en",
         "memorybank-zh-dev": "MemoryBank-zh", "longmemeval-dev": "LongMemEval"}


@dataclass(frozen=True, slots=True)
class Shape:
    """A data file and the budgets it is reported at."""

    path: Path
    budgets: tuple[int, ...]

    @property
    def key(self) -> str:
        """The file's stem (`memorybank-en-dev`): names result files."""
        return self.path.stem

    @property
    def name(self) -> str:
        """What a table calls it (`MemoryBank-en`)."""
        return NAMES.get(self.key, self.key)

    def spec(self) -> str:
        return f"{self.path}@{','.join(map(str, self.budgets))}"


BUDGETS = {"locomo-dev": (2000,), "memorybank-en-dev": (500, 1000),
           "memorybank-zh-dev": (500, 1000), "longmemeval-dev": (4000, 8000)}
"""Each dev set's budgets (by file stem): where its histories outgrow the prompt — LoCoMo's ~22k
tokens at 2,000, MemoryBank's 3–5k at 500 and 1,000, LongMemEval's 115–128k at 4,000 and at
8,000 (the shipped `compact_to_tokens`)."""
SHAPES = tuple(Shape(DATA_DIR / f"{stem}.json", BUDGETS[stem])
               for stem in ("locomo-dev", "memorybank-en-dev", "memorybank-zh-dev"))
"""The three short shapes at their budgets: what the commands run without `--data` (LongMemEval,
~10 minutes to embed on a first run, is asked for by `--data`)."""


def budget_list(text: str) -> tuple[int, ...]:
    budgets = tuple(int(b) for b in text.split(",") if b.strip())
    if not budgets or min(budgets) <= 0:
        raise ValueError(f"budgets must be positive integers, got {text!r}")
    return budgets


def parse(text: str, budgets: Sequence[int] = (2000,)) -> Shape:
    """`PATH[@B1,B2]`: the file, with its own budgets or `budgets` (an `@` not followed by
    budgets only is part of the path)."""
    path, _, own = text.rpartition("@")
    if path and re.fullmatch(r"[\d, ]+", own):
        return Shape(Path(path), budget_list(own))
    return Shape(Path(text), tuple(budgets))


def shapes(specs: Sequence[str] | None, budgets: Sequence[int] | None = None
           ) -> tuple[Shape, ...]:
    """The shapes `specs` name (each `PATH[@B1,B2]`; a bare path takes `budgets`), or the
    three default ones — at `budgets` when given."""
    if not specs:
        return SHAPES if budgets is None else tuple(Shape(s.path, tuple(budgets))
                                                   for s in SHAPES)
    return tuple(parse(s, budgets or (2000,)) for s in specs)


def column(shape: Shape, budget: int) -> str:
    """A table's column heading: `MemoryBank-zh 500`."""
    return f"{shape.name} {budget:,}"
