"""The whole configuration file (`Config`): its sections, the checks that span them, and the
secrets resolved at start-up; with the one top-level section that is only about where the store
is (`store_cluster:`)."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from gateway.config.access import AdminConfig
from gateway.config.encryption import EncryptionConfig
from gateway.config.memory import MemoryConfig
from gateway.config.operations import ConsoleConfig, TracingConfig
from gateway.config.recorder import RecorderConfig
from gateway.config.request import RequestLimitsConfig
from gateway.config.server import ServerConfig
from gateway.config.strict import Strict
from gateway.config.tenant import TenantConfig
from gateway.core.ids import valid_id
from gateway.errors import ConfigError


class StoreClusterConfig(Strict):
    """The store is a Redis Cluster (docs/cluster.md); `store` is the URL of any of
    its nodes, the others are discovered."""

    enabled: bool = False
    """false: one Redis (or the embedded one), key names as they always were."""
    shards: int = Field(16, ge=1, le=256)
    """How many shards users are hashed into: every key of a user, and the record stream and
    memory queue its turns go through, are in its shard's slot. Fixed for the life of the
    store: changing it renames every key (no migration is provided)."""


class Config(Strict):
    server: ServerConfig = ServerConfig()
    store: str = "embedded"
    """`embedded` (a bundled server in server.data_dir) or a redis://, rediss:// or unix:// URL."""
    store_cluster: StoreClusterConfig = StoreClusterConfig()
    recorder: RecorderConfig = RecorderConfig()
    memory: MemoryConfig = MemoryConfig()
    request_limits: RequestLimitsConfig = RequestLimitsConfig()
    tracing: TracingConfig = TracingConfig()
    admin: AdminConfig = AdminConfig()
    encryption: EncryptionConfig | None = None
    """The key of every tenant without its own `tenants.<name>.encryption`; unset (and no
    tenant key): nothing is encrypted."""
    console: ConsoleConfig = ConsoleConfig()
    tenants: dict[str, TenantConfig] = Field(min_length=1)

    @model_validator(mode="after")
    def _console_needs_admin_keys(self) -> Config:
        if self.console.enabled and not self.admin.keys:
            raise ValueError("console.enabled needs admin.keys: the console is signed in to "
                             "with an admin key")
        return self

    @model_validator(mode="after")
    def _cluster_needs_a_server(self) -> Config:
        if self.store_cluster.enabled and not self.store.startswith(("redis://", "rediss://")):
            raise ValueError("store_cluster.enabled needs `store` to be the redis:// or "
                             "rediss:// URL of a node of the cluster")
        return self

    @field_validator("store")
    @classmethod
    def _store_url(cls, value: str) -> str:
        if value != "embedded" and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must be `embedded` or a redis://, rediss:// or unix:// URL")
        return value

    @field_validator("tenants")
    @classmethod
    def _tenant_names(cls, value: dict[str, TenantConfig]) -> dict[str, TenantConfig]:
        for name in value:
            if not valid_id(name):
                raise ValueError(f"tenant name {name!r} must match [A-Za-z0-9][A-Za-z0-9._@:+=-]*")
        return value

    def request_limits_for(self, tenant: str) -> RequestLimitsConfig:
        """The top-level request limits with the tenant's own overrides (only the keys it
        sets)."""
        own = self.tenants[tenant].request_limits
        if own is None:
            return self.request_limits
        return self.request_limits.model_copy(
            update={k: getattr(own, k) for k in own.model_fields_set})

    def encryption_for(self, tenant: str) -> tuple[EncryptionConfig, str] | None:
        """The tenant's encryption settings and their dotted place in the config; None when
        its texts are stored in clear."""
        own = self.tenants[tenant].encryption
        if own is not None:
            return own, f"tenants.{tenant}.encryption"
        if self.encryption is not None:
            return self.encryption, "encryption"
        return None

    def key_digests(self) -> dict[str, str]:
        """sha256(key) -> tenant name. Raises ConfigError for a missing env var or a key
        shared by two tenants."""
        owners: dict[str, str] = {}
        for name, tenant in self.tenants.items():
            for i, key in enumerate(tenant.api_keys):
                digest = key.digest(f"tenants.{name}.api_keys.{i}")
                if digest in owners and owners[digest] != name:
                    raise ConfigError(f"tenants.{name}.api_keys.{i}: the same key is also "
                                      f"configured for tenant {owners[digest]}")
                owners[digest] = name
        return owners

    def admin_digests(self) -> list[str]:
        """sha256 of every admin key. Raises ConfigError for a missing env var or a key that
        is also a tenant's: a key is either an admin's or a tenant's, never both."""
        tenant_keys = self.key_digests()
        digests = []
        for i, key in enumerate(self.admin.keys):
            digest = key.digest(f"admin.keys.{i}")
            if digest in tenant_keys:
                raise ConfigError(f"admin.keys.{i}: the same key is configured for tenant "
                                  f"{tenant_keys[digest]}; an admin key must be its own")
            digests.append(digest)
        return digests

    def check_secrets(self) -> None:
        """Resolve every env-referenced secret now, so a missing one fails at start-up."""
        self.key_digests()
        if self.tracing.enabled:
            self.tracing.headers()
        self.admin_digests()
        for name, tenant in self.tenants.items():
            for alias, model in tenant.models.items():
                model.api_key(f"tenants.{name}.models.{alias}")
            encryption = self.encryption_for(name)
            if encryption is not None:
                encryption[0].keys(encryption[1])
