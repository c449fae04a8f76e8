"""The allocator settings of the long-running processes (gateway/ops/allocator.py): applied
to this process and passed to the processes it starts, an operator's own left alone."""

from __future__ import annotations

import ctypes.util
import sys

import pytest

from gateway.ops.allocator import ARENAS, MMAP_THRESHOLD, tune_allocator

glibc = pytest.mark.skipif(not sys.platform.startswith("linux")
                           or "libc.so" not in (ctypes.util.find_library("c") or ""),
                           reason="glibc only")


@glibc
def test_both_settings_are_applied_here_and_passed_on_to_child_processes():
    env: dict[str, str] = {}
    assert tune_allocator(env) == ["MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_"]
    assert env == {"MALLOC_ARENA_MAX": str(ARENAS),
                   "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD)}


@glibc
def test_a_setting_the_operator_chose_is_left_as_it_is():
    env = {"MALLOC_ARENA_MAX": "4"}
    assert tune_allocator(env) == ["MALLOC_MMAP_THRESHOLD_"]
    assert env["MALLOC_ARENA_MAX"] == "4"


def test_nothing_is_done_off_linux(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    env: dict[str, str] = {}
    assert tune_allocator(env) == [] and env == {}
