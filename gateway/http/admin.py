"""Admin keys: operator access to every tenant's user-control API and to `/metrics`.

Invariants: an admin key is never a tenant key (the config refuses one configured as both),
so it authenticates no chat request, and a tenant key never passes as an admin key. Keys are
held as sha256 digests only and compared in constant time, every digest every time.
"""

from __future__ import annotations

import hmac

from gateway.config import Config
from gateway.errors import Unauthorized
from gateway.config.tenants import bearer_digest


class AdminKeys:
    def __init__(self, config: Config):
        self._digests = tuple(config.admin_digests())
        self._metrics_public = config.admin.metrics_public

    @property
    def configured(self) -> bool:
        return bool(self._digests)

    def holds(self, authorization: str | None) -> bool:
        """Whether the request's bearer key is an admin key (False without one)."""
        if not self._digests or not authorization:
            return False
        try:
            digest = bearer_digest(authorization)
        except Unauthorized:
            return False
        # No early exit: the time taken does not depend on which key matched, if any.
        matched = False
        for known in self._digests:
            matched |= hmac.compare_digest(known, digest)
        return matched

    def check_metrics(self, authorization: str | None) -> None:
        """`/metrics` is public without admin keys or with `admin.metrics_public`; else 401
        unless the request holds an admin key."""
        if not self._digests or self._metrics_public:
            return
        if authorization is None:
            raise Unauthorized("`/metrics` needs an admin key: send "
                               "`Authorization: Bearer <admin key>`.")
        if not self.holds(authorization):
            raise Unauthorized("Incorrect admin key provided.")
