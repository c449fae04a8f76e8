"""The trimmer that hands the C allocator's free memory back (gateway/ops/allocator.py): it
calls its function at its interval on its own thread until stopped, stops for good on a
failure, and uses the C library's real `malloc_trim` where there is one."""

from __future__ import annotations

import logging
import platform
import threading

import pytest

from gateway.ops.allocator import Trimmer, malloc_trim, start_trimmer


def test_the_trimmer_calls_its_function_until_stopped():
    called = threading.Event()
    calls: list[int] = []

    def trim() -> int:
        calls.append(1)
        if len(calls) >= 3:
            called.set()
        return 1

    trimmer = Trimmer(trim, 0.001)
    trimmer.start()
    thread = trimmer._thread
    assert thread is not None and thread.name == "malloc-trim"
    assert called.wait(10)
    trimmer.stop()
    made = len(calls)
    assert made >= 3 and trimmer.calls == made
    assert not thread.is_alive() and trimmer._thread is None
    assert len(calls) == made  # none after stop()


def test_a_failing_trim_ends_the_thread_and_is_logged(caplog):
    def trim() -> int:
        raise OSError("no heap")

    trimmer = Trimmer(trim, 0.001)
    with caplog.at_level(logging.ERROR, logger="gateway.allocator"):
        trimmer.start()
        trimmer._thread.join(10)  # the thread ends by itself
        assert not trimmer._thread.is_alive()
        trimmer.stop()
    assert trimmer.calls == 0
    assert "malloc_trim failed" in caplog.text


def test_the_interval_must_be_positive():
    with pytest.raises(ValueError):
        Trimmer(lambda: 0, 0)


def test_no_trimmer_when_switched_off():
    assert start_trimmer(0) is None


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc_trim only")
def test_glibcs_malloc_trim_is_called_for_real():
    trim = malloc_trim()
    assert trim is not None
    assert trim() in (0, 1)  # 1: memory was released, 0: there was none to release
    trimmer = start_trimmer(60)
    assert trimmer is not None and trimmer.interval == 60
    trimmer.stop()
