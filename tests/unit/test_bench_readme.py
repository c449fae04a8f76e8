"""bench/README.md says how to run each benchmark and what it measures now, in at most 400
lines; the record of earlier runs and of what was tried lives in bench/NOTEBOOK.md. Pure: reads
two files."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 400


def test_the_bench_readme_is_at_most_400_lines():
    lines = (ROOT / "bench" / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= LIMIT, (
        f"bench/README.md has {len(lines)} lines (at most {LIMIT}): move earlier runs and "
        f"explanations to bench/NOTEBOOK.md, leaving a pointer")


def test_the_readme_points_at_the_notebook():
    readme = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    assert "(NOTEBOOK.md)" in readme and (ROOT / "bench" / "NOTEBOOK.md").is_file()
