"""Encryption at rest (`encryption:` and `tenants.<name>.encryption:`): which environment
variables hold the keys."""

from __future__ import annotations

from pydantic import Field

from gateway.config.strict import Strict, parse_key, required_env
from gateway.errors import ConfigError


class EncryptionConfig(Strict):
    """Encryption at rest of every stored text (docs/encryption.md). Keys are 32
    random bytes, base64 or hex, in environment variables — never in the file or the store."""

    key_env: str = Field(min_length=1)
    """The variable holding the key that seals new texts (and opens them)."""
    previous_key_env: str | None = None
    """During a key rotation: the variable holding the key being replaced (opens only)."""

    def keys(self, where: str) -> tuple[bytes, bytes | None]:
        """(current, previous) keys; ConfigError naming `where`'s key if one is missing or
        is not a 256-bit key."""
        def read(field: str, name: str) -> bytes:
            value = required_env(name, f"{where}.{field}")
            try:
                return parse_key(value)
            except ValueError as exc:
                raise ConfigError(f"{where}.{field}: environment variable {name} is not a "
                                  f"256-bit key ({exc}); make one with `python -c \"import "
                                  f"os, base64; print(base64.b64encode(os.urandom(32)).decode())\"`"
                                  ) from None
        current = read("key_env", self.key_env)
        previous = read("previous_key_env", self.previous_key_env) \
            if self.previous_key_env else None
        return current, previous
