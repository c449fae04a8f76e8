"""Tenants as the request path sees them: who a key belongs to, and where its models go."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any, Mapping

from gateway.config.access import hash_key
from gateway.config.request import HeaderConfig, RequestLimitsConfig
from gateway.config.root import Config
from gateway.core.one_shot import OneShotPolicy
from gateway.core.policy import ContextPolicy
from gateway.errors import ModelNotFound, Unauthorized


@dataclass(frozen=True, slots=True)
class ModelRoute:
    alias: str
    model: str
    api_base: str | None
    api_key: str | None
    timeout: float
    litellm_params: Mapping[str, Any]
    cache_hints: bool | None = None
    """The route's `cache_hints` setting (gateway/upstream/endpoint.py's `cache_hint`)."""
    stream_usage: bool = True
    """Whether a stream's usage is asked for when the client did not (`models.*.stream_usage`)."""


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    routes: Mapping[str, ModelRoute]
    policy: ContextPolicy
    headers: HeaderConfig
    request_limits: RequestLimitsConfig
    one_shot: OneShotPolicy = OneShotPolicy()

    def route(self, alias: str) -> ModelRoute:
        try:
            return self.routes[alias]
        except KeyError:
            raise ModelNotFound(f"The model `{alias}` does not exist for this API key. "
                                f"Known models: {', '.join(sorted(self.routes))}.",
                                param="model") from None


class TenantDirectory:
    """Maps API keys to tenants. Keys are only ever held as sha256 digests."""

    def __init__(self, config: Config):
        self._tenants = {
            name: Tenant(
                name=name,
                routes={alias: ModelRoute(alias, m.model, m.api_base,
                                          m.api_key(f"tenants.{name}.models.{alias}"),
                                          m.timeout_seconds, dict(m.litellm_params),
                                          m.cache_hints, m.stream_usage)
                        for alias, m in t.models.items()},
                policy=t.context.policy(),
                headers=t.headers,
                request_limits=config.request_limits_for(name),
                one_shot=t.context.one_shot(),
            )
            for name, t in config.tenants.items()
        }
        self._by_digest = config.key_digests()

    def tenant(self, name: str) -> Tenant:
        return self._tenants[name]

    def authenticate(self, authorization: str | None) -> Tenant:
        return self.authenticate_key(authorization)[0]

    def authenticate_key(self, authorization: str | None) -> tuple[Tenant, str]:
        """The tenant of the request's key, and the key's sha256 (which names its limits)."""
        digest = bearer_digest(authorization)
        for known, tenant in self._by_digest.items():
            if hmac.compare_digest(known, digest):
                return self._tenants[tenant], known
        raise Unauthorized("Incorrect API key provided.")


def bearer_digest(authorization: str | None) -> str:
    """sha256 of the key in `Authorization: Bearer <key>`; 401 when there is none."""
    scheme, _, key = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise Unauthorized("Missing API key: send `Authorization: Bearer <key>`.")
    return hash_key(key.strip())
