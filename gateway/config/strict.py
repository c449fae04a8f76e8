"""The base of every config model (unknown keys are errors, values are frozen), the one way a
config value names a secret (an environment variable that must be set), and the form of an
encryption key (gateway/store/encryption/crypto.py uses it)."""

from __future__ import annotations

import base64
import binascii
import os

from pydantic import BaseModel, ConfigDict

from gateway.errors import ConfigError

KEY_BYTES = 32
"""AES-256."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def required_env(name: str, where: str) -> str:
    """The value of environment variable `name`; ConfigError naming the dotted key `where`
    that refers to it when it is unset or empty."""
    value = os.environ.get(name)
    if not value:
        raise ConfigError(f"{where}: environment variable {name} is not set")
    return value


def parse_key(value: str) -> bytes:
    """A 256-bit key from its base64 (standard or URL-safe) or hex text; ValueError if not."""
    value = value.strip()
    if len(value) == 2 * KEY_BYTES and all(c in "0123456789abcdefABCDEF" for c in value):
        return bytes.fromhex(value)
    try:
        raw = base64.b64decode(value + "=" * (-len(value) % 4), altchars=b"-_"
                               if ("-" in value or "_" in value) else None, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not base64 or hex") from None
    if len(raw) != KEY_BYTES:
        raise ValueError(f"decodes to {len(raw)} bytes, not {KEY_BYTES} (AES-256)")
    return raw
