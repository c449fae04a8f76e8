"""A tenant's upstream models (`tenants.<name>.models.<alias>`): where a model name goes, how
it is called, and what it costs."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gateway.config.strict import Strict, required_env


class ModelPriceConfig(Strict):
    """A model's price per million tokens, in one currency for the whole file (litellm's
    table is in US dollars). All 0: a self-hosted model."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(None, ge=0)
    """A prompt token read from the provider's cache; null: as `input`."""
    cache_write_input: float | None = Field(None, ge=0)
    """A prompt token written to the provider's cache (Anthropic); null: as `input`."""


class ModelConfig(Strict):
    model: str = Field(min_length=1)
    """A litellm model string (`openai/gpt-4o-mini`), or `fake/<behaviour>` for the built-in
    fake upstream (echo, echo-messages, slow, error, ...)."""
    api_base: str | None = None
    api_key_env: str | None = None
    timeout_seconds: float = Field(600.0, gt=0)
    litellm_params: dict[str, Any] = Field(default_factory=dict)
    """Further per-call litellm arguments (api_version, ...). Never secrets: use api_key_env."""
    price: ModelPriceConfig | None = None
    """What the model costs; null: litellm's cost map, by the model's name (unknown there:
    the spend is null, never guessed)."""
    cache_hints: bool | None = None
    """Send the provider's prompt-cache hints (`prompt_cache_key` to OpenAI-compatible
    models, `cache_control` to Anthropic ones); null: only to OpenAI's own API and `anthropic/`
    models, which take them (another server might refuse a field it does not know)."""
    stream_usage: bool = True
    """Ask a stream's usage (`stream_options.include_usage`) when the client did not, and keep
    it from that client; false for a server that refuses the field (its streams are then not
    counted nor priced)."""

    def api_key(self, where: str) -> str | None:
        if self.api_key_env is None:
            return None
        return required_env(self.api_key_env, f"{where}.api_key_env")
