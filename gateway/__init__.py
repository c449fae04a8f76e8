"""Context Gateway: an OpenAI-compatible memory gateway."""

from gateway import _offline  # noqa: F401  (must run before anything imports litellm/tiktoken)

__version__ = "0.1.0"
