"""The two ways to run a benchmark: `python -m bench <name>` from a source checkout, and
`gateway bench <name>` — the installed console script, which replaces itself with the first
without putting anything on `sys.path` — and what `gateway bench` says where there is no
bench/ to run. Real processes; each asks only for `--help` (or nothing), so nothing is
measured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = Path(sys.executable).parent / "gateway"


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def gateway(*args: str) -> list[str]:
    """The console script when the environment has one, else the same `main` by `-m`."""
    return [str(GATEWAY), *args] if GATEWAY.is_file() else [sys.executable, "-m", "gateway",
                                                            *args]


@pytest.mark.parametrize("name", ["locomo-simulate", "locomo-ranker"])
def test_python_m_bench_and_gateway_bench_give_the_same_help(name):
    direct = run([sys.executable, "-m", "bench", name, "--help"], ROOT)
    through = run(gateway("bench", name, "--help"), ROOT)
    assert direct.returncode == 0, direct.stderr
    assert through.returncode == 0, through.stderr
    assert f"usage: python -m bench {name}" in direct.stdout
    assert through.stdout == direct.stdout


def test_gateway_bench_passes_the_benchmarks_exit_status_through():
    unknown = run(gateway("bench", "no-such-benchmark"), ROOT)
    assert unknown.returncode == 2
    assert "usage: python -m bench {" in unknown.stderr


def test_gateway_bench_outside_a_checkout_says_where_to_run_it(tmp_path):
    if not GATEWAY.is_file():
        pytest.skip("no console script: `python -m gateway` puts the directory on sys.path")
    outside = run([str(GATEWAY), "bench", "locomo-simulate", "--help"], tmp_path)
    assert outside.returncode == 2
    assert "run it from a source checkout" in outside.stderr
