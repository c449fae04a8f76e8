"""One tenant's section of the file (`tenants.<name>:`): its keys, models, context, headers,
memory, limits and encryption. The request path's view of tenants is tenants.py."""

from __future__ import annotations

from pydantic import Field, model_validator

from gateway.config.access import RateLimitsConfig, TenantApiKey
from gateway.config.context import ContextConfig
from gateway.config.encryption import EncryptionConfig
from gateway.config.memory import TenantMemoryConfig
from gateway.config.request import HeaderConfig, RequestLimitsConfig
from gateway.config.strict import Strict
from gateway.config.upstream import ModelConfig


class TenantConfig(Strict):
    api_keys: list[TenantApiKey] = Field(min_length=1)
    rate_limits: RateLimitsConfig = RateLimitsConfig()
    models: dict[str, ModelConfig] = Field(min_length=1)
    context: ContextConfig = ContextConfig()
    headers: HeaderConfig = HeaderConfig()
    memory: TenantMemoryConfig = TenantMemoryConfig()
    request_limits: RequestLimitsConfig | None = None
    """Overrides of the top-level `request_limits` for this tenant: the keys given here win."""
    encryption: EncryptionConfig | None = None
    """This tenant's own key (instead of the top-level `encryption`)."""

    @model_validator(mode="after")
    def _memory_models_exist(self) -> TenantConfig:
        for field in ("summarizer_model", "extractor_model"):
            alias = getattr(self.memory, field)
            if alias is not None and alias not in self.models:
                raise ValueError(f"memory.{field}: {alias!r} is not one of this tenant's models")
        if self.memory.topics.classifier and self.memory.summarizer_model is None:
            raise ValueError("memory.topics.classifier: the classifier is the tenant's "
                             "summariser; set memory.summarizer_model too")
        return self
