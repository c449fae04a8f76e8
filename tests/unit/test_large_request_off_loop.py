"""OffLoop: a step runs on another thread, counted by step; the switch interval is lowered
only while a step runs and restored after, also when steps overlap or one raises."""

from __future__ import annotations

import sys
import threading

import anyio
import pytest
from prometheus_client import CollectorRegistry, Counter

from gateway.pipeline.off_loop import OffLoop


def counter() -> tuple[Counter, CollectorRegistry]:
    registry = CollectorRegistry()
    return Counter("steps", "steps", ["step"], registry=registry), registry


def test_a_step_runs_on_another_thread_and_is_counted():
    steps, registry = counter()
    off_loop = OffLoop(steps)

    async def main() -> tuple[int, int]:
        return threading.get_ident(), await off_loop.run("parse", threading.get_ident)

    loop_thread, step_thread = anyio.run(main)
    assert loop_thread != step_thread
    assert registry.get_sample_value("steps_total", {"step": "parse"}) == 1
    assert registry.get_sample_value("steps_total", {"step": "rewrite"}) is None


def test_the_switch_interval_is_lowered_while_steps_run_and_restored_after():
    default = sys.getswitchinterval()
    off_loop = OffLoop(switch_interval=default / 10)
    seen: list[float] = []
    release = threading.Event()

    def held() -> None:
        seen.append(sys.getswitchinterval())
        release.wait(10)

    def quick() -> None:
        seen.append(sys.getswitchinterval())
        release.set()

    async def main() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(off_loop.run, "parse", held)
            await anyio.wait_all_tasks_blocked()
            await off_loop.run("rewrite", quick)  # overlaps the first
        seen.append(sys.getswitchinterval())

    try:
        anyio.run(main)
    finally:
        sys.setswitchinterval(default)
    assert seen == [default / 10, default / 10, default]


def test_a_step_that_raises_raises_at_the_caller_and_restores_the_interval():
    default = sys.getswitchinterval()
    off_loop = OffLoop(switch_interval=default / 10)

    def broken() -> None:
        raise ValueError("bad body")

    with pytest.raises(ValueError, match="bad body"):
        anyio.run(off_loop.run, "parse", broken)
    assert sys.getswitchinterval() == default


def test_sizes_decide_what_is_large():
    off_loop = OffLoop(min_body_bytes=100, min_messages=10)
    assert not off_loop.large_body(99) and off_loop.large_body(100)
    assert not off_loop.large_conversation(9) and off_loop.large_conversation(10)
