"""Shared test set-up. Fixture modules live in tests/support/ and are registered here."""

import os

# litellm's async path uses aiohttp unless told otherwise; respx intercepts httpx only.
os.environ.setdefault("DISABLE_AIOHTTP_TRANSPORT", "True")

import gateway  # noqa: E402,F401  (sets the offline environment before litellm is imported)

pytest_plugins = ["tests.support.redis", "tests.support.cluster"]

from hypothesis import settings  # noqa: E402

# Every property test: the same cases on every run and machine (derandomized, no example
# database), and no per-example deadline — a busy 2-core machine is not a failing property
# (speed is measured in bench/, not asserted here). A test's own @settings still narrows this.
settings.register_profile("gateway", derandomize=True, database=None, deadline=None)
settings.load_profile("gateway")


def pytest_terminal_summary(terminalreporter):
    """Counts the scale-out and failure tests report (turns sent, stored, lost, ...), shown in
    CI's log whether they pass or fail."""
    from tests.support.processes import REPORTS

    if REPORTS:
        terminalreporter.section("scale-out and failure test counts")
        for line in REPORTS:
            terminalreporter.write_line(line)
