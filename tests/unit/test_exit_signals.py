"""`gateway serve`'s signal handling around uvicorn (gateway.cli._ExitSignals): a signal while
armed ends the server; before arming or after disarming it is only noted, so the embedded
store's start and stop are never cut short. Real signals sent to this process."""

from __future__ import annotations

import signal

import pytest

from gateway.cli import _ExitSignals, _Signalled


@pytest.fixture
def exit_signals():
    found = {s: signal.getsignal(s) for s in _ExitSignals.SIGNALS}
    try:
        yield _ExitSignals()
    finally:
        for s, handler in found.items():
            signal.signal(s, handler)


def test_a_signal_while_armed_ends_the_server_once(exit_signals):
    exit_signals.arm()
    with pytest.raises(_Signalled) as ended:
        signal.raise_signal(signal.SIGTERM)
    assert ended.value.signum == signal.SIGTERM
    signal.raise_signal(signal.SIGINT)  # the stop has begun: noted, not raised
    assert exit_signals.received == [signal.SIGTERM, signal.SIGINT]


def test_a_signal_after_disarming_is_noted_and_the_stop_goes_on(exit_signals):
    exit_signals.arm()
    exit_signals.disarm()
    signal.raise_signal(signal.SIGTERM)
    signal.raise_signal(signal.SIGINT)
    assert exit_signals.received == [signal.SIGTERM, signal.SIGINT]


def test_a_signal_while_the_store_starts_ends_the_server_as_it_is_armed(exit_signals):
    signal.raise_signal(signal.SIGINT)  # not armed yet: noted
    assert exit_signals.received == [signal.SIGINT]
    with pytest.raises(_Signalled) as ended:
        exit_signals.arm()
    assert ended.value.signum == signal.SIGINT
