"""A store outage is logged when it starts, as a reminder now and then, and when it ends."""

import logging

from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.store.outage import OutageLog


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_outage_is_logged_once_then_reminded_then_its_end(caplog):
    clock = Clock()
    outage = OutageLog(logging.getLogger("gateway.test"), "worker", every=30, clock=clock)
    with caplog.at_level(logging.WARNING, logger="gateway.test"):
        for second in range(0, 65, 1):  # one failed poll a second for a minute
            clock.now = second
            outage.failed(RedisConnectionError("refused"))
        clock.now = 70
        outage.succeeded()
        outage.succeeded()  # nothing more while all is well
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 4
    assert "unreachable" in messages[0] and "after 30 s" in messages[1]
    assert "after 60 s" in messages[2] and "reachable again after 70.0 s" in messages[3]


def test_other_errors_are_logged_in_full_every_time(caplog):
    outage = OutageLog(logging.getLogger("gateway.test"), "worker")
    with caplog.at_level(logging.WARNING, logger="gateway.test"):
        outage.failed(ValueError("a bug"))
        outage.failed(ValueError("a bug"))
    assert len(caplog.records) == 2 and all(r.exc_info for r in caplog.records)
