"""Shared test set-up. Fixture modules live in tests/support/ and are registered here."""

import os

# litellm's async path uses aiohttp unless told otherwise; respx intercepts httpx only.
os.environ.setdefault("DISABLE_AIOHTTP_TRANSPORT", "True")

import gateway  # noqa: E402,F401  (sets the offline environment before litellm is imported)

pytest_plugins = ["tests.support.redis"]
