"""Re-recording the rewrite's golden files (tests/fixtures/rewrite_golden.json and
rewrite_golden_pinned.json, checked by tests/unit/test_rewrite_golden.py) on purpose and in
view:

    python -m tests.golden             # print what changed, case by case; write nothing
    python -m tests.golden --accept    # the same, then write the files
    python -m tests.golden --plain     # only rewrite_golden.json (--pinned: only the other)

Each case is compared field by field — the digest of the whole rewrite, the counts, the memory
blocks, the recalled ids, and one `role kind tokens` line per forwarded message, diffed line by
line — so a changed case says what changed. Without `--accept` nothing is written and the exit
status is 1 when a case differs; re-record only for a change of behaviour that is meant, and
say in the test module's docstring which cases changed and why.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

Cases = Mapping[str, Mapping[str, Any]]


def case_diffs(recorded: Cases, current: Cases) -> list[str]:
    """Readable lines for every case that differs between `recorded` and `current` (empty:
    identical), in the files' order."""
    lines: list[str] = []
    for key in sorted(recorded.keys() | current.keys(), key=_order):
        old, new = recorded.get(key), current.get(key)
        if old == new:
            continue
        if old is None or new is None:
            lines.append(f"{key}: {'added' if old is None else 'removed'}")
            continue
        lines.append(f"{key}:")
        for field in sorted(old.keys() | new.keys()):
            before, after = old.get(field), new.get(field)
            if before == after:
                continue
            if field == "messages" and before is not None and after is not None:
                lines.append("  messages:")
                lines += [f"    {line}" for line in difflib.unified_diff(
                    before, after, lineterm="", n=1)][2:]  # without the ---/+++ header
            else:
                lines.append(f"  {field}: {_shown(before)} -> {_shown(after)}")
    return lines


def tally(recorded: Cases, current: Cases) -> str:
    """One line: how many cases differ, and how many of them in their digest."""
    keys = recorded.keys() | current.keys()
    changed = [k for k in keys if recorded.get(k) != current.get(k)]
    digests = [k for k in changed if (recorded.get(k) or {}).get("digest")
               != (current.get(k) or {}).get("digest")]
    return (f"{len(keys)} cases: {len(changed)} differ, {len(digests)} of them in the digest "
            f"(the rewrite's output), {len(changed) - len(digests)} in the readable fields only")


def _order(key: str) -> tuple[str, int]:
    name, _, seed = key.rpartition("/")
    return name, int(seed) if seed.isdigit() else -1


def _shown(value: Any) -> str:
    return "(not recorded)" if value is None else json.dumps(value, ensure_ascii=False)


def rerecord(path: Path, current: Cases, accept: bool) -> tuple[list[str], bool]:
    """What changed between the file at `path` and `current` (the diff, then the tally), and
    whether anything did; the file is written only when something changed and `accept`."""
    recorded = json.loads(path.read_text()) if path.exists() else {}
    lines = case_diffs(recorded, current) + [f"{path.name}: {tally(recorded, current)}"]
    changed = recorded != current
    if changed and accept:
        path.write_text(json.dumps(current, indent=0, sort_keys=True, ensure_ascii=False) + "\n")
        lines.append(f"{path.name}: written")
    return lines, changed


def main(argv: list[str] | None = None) -> int:
    from tests.unit.test_rewrite_golden import GOLDEN, GOLDEN_PINNED, record, record_pinned

    parser = argparse.ArgumentParser(prog="python -m tests.golden",
                                     description="Show what changed in the rewrite's golden "
                                                 "files, case by case; write them with --accept.")
    parser.add_argument("--accept", action="store_true",
                        help="write the files (default: only show what changed)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--plain", action="store_true", help="only rewrite_golden.json")
    which.add_argument("--pinned", action="store_true", help="only rewrite_golden_pinned.json")
    args = parser.parse_args(argv)
    files: list[tuple[Path, Callable[[], Cases]]] = []
    if not args.pinned:
        files.append((GOLDEN, record))
    if not args.plain:
        files.append((GOLDEN_PINNED, record_pinned))
    differ = False
    for path, recorder in files:
        lines, changed = rerecord(path, recorder(), args.accept)
        print("\n".join(lines))
        differ = differ or changed
    if differ and not args.accept:
        print("nothing written: run again with --accept to record these changes")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
