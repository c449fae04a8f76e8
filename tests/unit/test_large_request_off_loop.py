"""OffLoop: a step runs on another thread, counted by step; the switch interval is lowered
only while a step runs and restored after, also when steps overlap or one raises; after a
step, a request waits as long as the step took only while other requests are in flight."""

from __future__ import annotations

import sys
import threading
import time

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


class Waits:
    """Records what OffLoop asks to wait, without waiting."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.seconds.append(seconds)


def test_a_request_alone_does_not_wait_after_its_step():
    waits = Waits()
    off_loop = OffLoop(wait=waits)

    async def main() -> None:
        with off_loop.serving():
            await off_loop.run("parse", time.sleep, 0.01)

    anyio.run(main)
    assert waits.seconds == []


def test_a_request_waits_as_long_as_its_step_took_while_another_is_in_flight():
    steps, registry = counter()
    waits = Waits()
    off_loop = OffLoop(yields=steps, wait=waits)

    async def main() -> None:
        with off_loop.serving():  # another request, on the loop
            with off_loop.serving():
                await off_loop.run("parse", time.sleep, 0.01)
                await off_loop.run("rewrite", time.sleep, 0.01)
        await off_loop.run("count", time.sleep, 0)  # the other is done: no wait

    anyio.run(main)
    assert len(waits.seconds) == 2 and min(waits.seconds) >= 0.01
    assert registry.get_sample_value("steps_total", {"step": "parse"}) == 1
    assert registry.get_sample_value("steps_total", {"step": "rewrite"}) == 1
    assert registry.get_sample_value("steps_total", {"step": "count"}) is None


def test_requests_whose_steps_all_run_off_the_loop_do_not_wait_for_each_other():
    waits = Waits()
    off_loop = OffLoop(wait=waits)
    release = threading.Event()

    async def request(fn, *args) -> None:
        with off_loop.serving():
            await off_loop.run("parse", fn, *args)

    async def main() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(request, release.wait, 10)
            await anyio.wait_all_tasks_blocked()
            await request(release.set)  # ends while the first one's step still runs

    anyio.run(main)
    assert waits.seconds == []


def test_the_requests_in_flight_are_counted_down_when_one_fails():
    waits = Waits()
    off_loop = OffLoop(wait=waits)

    async def main() -> None:
        with pytest.raises(ValueError):
            with off_loop.serving():
                raise ValueError("bad body")
        with off_loop.serving():
            await off_loop.run("parse", time.sleep, 0)

    anyio.run(main)
    assert waits.seconds == []
