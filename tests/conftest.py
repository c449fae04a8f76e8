"""Shared test set-up. Fixture modules live in tests/support/ and are registered here."""

import os

import pytest

# litellm's async path uses aiohttp unless told otherwise; respx intercepts httpx only.
os.environ.setdefault("DISABLE_AIOHTTP_TRANSPORT", "True")

import gateway  # noqa: E402,F401  (sets the offline environment before litellm is imported)

pytest_plugins = ["tests.support.redis", "tests.support.cluster", "tests.support.embedded"]

from tests.support.tls import share_default_ssl_context  # noqa: E402

share_default_ssl_context()

from hypothesis import settings  # noqa: E402

# Every property test: the same cases on every run and machine (derandomized, no example
# database), and no per-example deadline — a busy 2-core machine is not a failing property
# (speed is measured in bench/, not asserted here). A test's own @settings still narrows this.
settings.register_profile("gateway", derandomize=True, database=None, deadline=None)
settings.load_profile("gateway")


COUNTS = "count line"
"""The key under which a test's count lines travel on its report (`user_properties`): with
pytest-xdist (./scripts/test runs the suite on every core) the tests run in worker processes,
and only what a report carries reaches the process that prints the summary."""

_counted = 0
_summary: list[str] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """The count lines this test added (tests/support/processes.report), on its report."""
    global _counted
    outcome = yield
    from tests.support.processes import REPORTS

    if len(REPORTS) > _counted:
        outcome.get_result().user_properties.extend(
            (COUNTS, line) for line in REPORTS[_counted:])
        _counted = len(REPORTS)


def pytest_runtest_logreport(report):
    _summary.extend(value for key, value in report.user_properties if key == COUNTS)


def pytest_terminal_summary(terminalreporter):
    """Counts the scale-out and failure tests report (turns sent, stored, lost, ...), shown in
    CI's log whether they pass or fail."""
    if _summary:
        terminalreporter.section("scale-out and failure test counts")
        for line in _summary:
            terminalreporter.write_line(line)
