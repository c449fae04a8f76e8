"""Writing a benchmark's result: FILE.json (the data) and FILE.md (its report) beside it, the
report also printed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_result(out: Path, data: Any, markdown: str, *, indent: int = 2,
                 ensure_ascii: bool = True) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=indent, ensure_ascii=ensure_ascii) + "\n")
    out.with_suffix(".md").write_text(markdown)
    print(markdown)
