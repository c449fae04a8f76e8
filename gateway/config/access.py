"""Who may call the gateway and how much: tenant and admin API keys (never literal: an
environment variable or a sha256 digest) and rate limits."""

from __future__ import annotations

import hashlib
import re

from pydantic import Field, model_validator

from gateway.config.strict import Strict, required_env


class ApiKey(Strict):
    env: str | None = None
    sha256: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ApiKey:
        if (self.env is None) == (self.sha256 is None):
            raise ValueError("give exactly one of `env` (an environment variable name) "
                             "or `sha256` (the hex digest of the key)")
        if self.sha256 is not None and not re.fullmatch(r"[0-9a-f]{64}", self.sha256):
            raise ValueError("sha256 must be 64 lowercase hex characters")
        return self

    def digest(self, where: str) -> str:
        if self.sha256 is not None:
            return self.sha256
        return hash_key(required_env(self.env or "", f"{where}.env"))


class RateLimitsConfig(Strict):
    """Rate limits over any 60 seconds, counted in the store (shared by every replica).
    None: no limit of that kind."""

    requests_per_minute: int | None = Field(None, ge=1)
    tokens_per_minute: int | None = Field(None, ge=1)
    """Prompt tokens as forwarded upstream (after the rewrite), plus completion tokens once
    the answer is known (debited after the fact: they delay the next requests)."""


class TenantApiKey(ApiKey):
    rate_limits: RateLimitsConfig = RateLimitsConfig()
    """Limits of this key alone, on top of the tenant's (which all its keys share)."""


class AdminConfig(Strict):
    """Operator access: the user-control API across every tenant's users, and `/metrics`."""

    keys: list[ApiKey] = Field(default_factory=list)
    """Admin keys, in the same forms as tenant keys. None: no admin access exists, and
    `/metrics` stays public as before."""
    metrics_public: bool = False
    """Serve `/metrics` without a key even when admin keys are set (a scraper inside a
    private network)."""


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()
