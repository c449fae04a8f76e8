"""The gateway's configuration: strict, typed, and loud about mistakes.

Every model rejects unknown keys, and a bad file fails at start-up with the dotted key and the
reason (`tenants.acme.context.max_recent_turns: Input should be greater than 0`). Secrets never
live in the file: strings may reference environment variables as `${NAME}` (or
`${NAME:-default}`), API keys are either `{env: NAME}` or `{sha256: <hex digest>}`, and model
keys are named by `api_key_env`.

Every layer above the core may import the config; it imports only core and errors (its
checks of installed extras live in `extras.py`, not in the adapters).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

# ApiKey and hash_key are re-exported: callers import them from gateway.config.
from gateway.config.access import AdminConfig, RateLimitsConfig, TenantApiKey
from gateway.config.access import ApiKey as ApiKey
from gateway.config.access import hash_key as hash_key
from gateway.config.memory import MemoryConfig, TenantMemoryConfig
from gateway.config.operations import ConsoleConfig, TracingConfig
from gateway.config.strict import Strict, parse_key, required_env
from gateway.core.ids import valid_id
from gateway.core.one_shot import OneShotPolicy
from gateway.core.policy import ContextPolicy
from gateway.errors import ConfigError

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_HEADER_NAME = re.compile(r"[A-Za-z0-9-]+")


class ServerConfig(Strict):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)
    workers: int = Field(1, ge=1, le=64)
    data_dir: Path = Path("./data")
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    store_timeout_seconds: float = Field(2.0, gt=0)
    """A request-path store call slower than this fails open: the request goes through
    without memory (and its turn waits in the record buffer)."""
    store_pool_size: int = Field(100, ge=1, le=10_000)
    """Connections each worker process keeps to the store for requests and memory. When all
    are in use a request waits for one (at most store_timeout_seconds) instead of failing."""
    log_format: Literal["json", "text"] = "json"
    """json: every line the gateway's processes print is one JSON object (uvicorn's lines,
    warnings and tracebacks included); text: the message alone, uvicorn's own format."""
    shutdown_timeout_seconds: float = Field(30.0, gt=0, le=3600)
    """On SIGTERM: how long in-flight requests (streams included) may take to finish before
    they are cancelled; then the recorder and the record buffer are drained."""


class RecorderConfig(Strict):
    mode: Literal["process", "external", "background", "inline"] = "process"
    """Where recorded turns are applied and memory is derived (gateway/worker.py):
    process: a worker process `gateway serve` starts beside the serving processes;
    external: none here — run `gateway worker` yourself (scale-out);
    background: tasks on each serving process's event loop (competes with requests);
    inline: each turn before the response returns (tests and debugging only)."""
    workers: int = Field(1, ge=1, le=32)
    process_nice: int = Field(10, ge=0, le=19)
    """How much lower the CPU priority of the worker process is than the server's (Unix
    `nice`): on a shared core, requests come first and memory work takes what is left."""
    max_attempts: int = Field(5, ge=1, le=100)
    backoff_seconds: float = Field(0.2, gt=0)
    claim_idle_seconds: float = Field(30.0, gt=0)
    drain_timeout_seconds: float = Field(10.0, ge=0)
    buffer_capacity: int = Field(10_000, ge=1, le=1_000_000)
    """Turns held in process while the store cannot take them (an outage), flushed in order
    when it is back; beyond this many, the oldest are dropped — logged and counted."""
    buffer_retry_max_seconds: float = Field(1.0, gt=0, le=300)
    """The longest pause between flush attempts while the store stays down."""


class RequestLimitsConfig(Strict):
    """What one chat request may carry; a request beyond a limit gets a 400 in its door's error
    shape naming the field (`messages`, `messages[3].content`; `input[3].content`;
    `messages.3.content`), before anything else reads it."""

    max_messages: int = Field(2048, ge=1, le=1_000_000)
    """Messages per request (OpenAI's own API allows 2,048)."""
    max_message_chars: int = Field(1_000_000, ge=1)
    """Characters of one message's text (its string content, or its text parts together).
    Characters, not tokens: counted by `len` before the request is validated, while a token
    count needs the model's tokenizer and costs ~0.3 s of CPU for a 4 MiB body."""
    max_stored_messages: int = Field(10_000, ge=4, le=10_000_000)
    """Messages of a conversation kept in its live transcript (what every request loads and
    reconciles). Beyond it the oldest are not refused and never lost: once memory has indexed
    and compacted them they move to the conversation's archive (still recalled, exported and
    erased with it). A request whose new messages alone exceed it gets a 400 (`messages`)."""


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


class ContextConfig(Strict):
    max_context_tokens: int = Field(32000, gt=0)
    """The model's window as the tenant wants it used, prompt plus completion: a history that
    fits goes whole and append-only (the provider's prompt cache serves all of it but the new
    turn). Never more than the model's own window."""
    compact_to_tokens: int | None = Field(8000, gt=0)
    """A history over the window is compacted to this, prompt plus completion (at most
    `max_context_tokens`); null: to `max_context_tokens`."""
    reserve_completion_tokens: int = Field(1000, ge=0)
    max_recent_turns: int = Field(6, gt=0)
    truncate_message_tokens: int = Field(1000, gt=16)
    min_recent_turns: int = Field(1, ge=0)
    """The newest turns kept before recalled memory takes its share of the budget."""
    recent_share: float = Field(0.25, ge=0, le=1)
    """At most this share of the room for those newest turns: a longer turn is shortened
    (head and a visible mark), never dropped. 0: off."""
    # Shares of the room left after the client's system prompts and current message; what a
    # layer does not use flows to the recent turns (and what they leave, to recall).
    summary_share: float = Field(0.0, ge=0, le=1)
    profile_share: float = Field(0.05, ge=0, le=1)
    recall_share: float = Field(0.95, ge=0, le=1)
    assembly: Literal["auto", "rolling", "stepped"] = "auto"
    """How a compacted prompt is laid out: `stepped`, a verbatim window whose start moves only
    in steps, so that a provider's prompt cache serves consecutive prompts (profile and recall
    after it); `rolling`, the newest turns sliding by one exchange a request; `auto`, stepped
    from a 4,000-token prompt budget, rolling below (core.policy.STEPPED_FROM_TOKENS)."""
    window_share: float = Field(0.9, gt=0, le=1)
    """Stepped: the verbatim window grows to at most this share of the prompt budget."""
    outside_share: float = Field(0.05, ge=0, le=1)
    """When the history is forwarded whole (it fits the window): at most this share of the
    compacted prompt's room for memory from outside it (the profile, recall from the user's
    other conversations), once the conversation has a history; its first request gets the
    whole room. That tail is paid in full every turn (bench/README.md, "gateway bench cost")."""
    pinned_share: float = Field(0.25, ge=0, le=1)
    """At most this share for pinned messages, granted before the others (so it is not part
    of their sum): what is pinned is never shortened, and what does not fit waits. 0: pins
    are neither read nor shown (they stay listed in the memory API)."""
    continuity_turns: int = Field(3, ge=0)
    """At prompt budgets of at least `continuity_budget`, the newest this many user turns are
    always forwarded (shortened to fit `recent_share` if need be)."""
    continuity_budget: int = Field(4000, ge=0)
    """The prompt budget from which `continuity_turns` applies (below: `min_recent_turns`)."""
    one_shot_tool_chars: int | None = Field(8000, ge=1)
    """A `tool` message longer than this (characters of its text; ~2,000 tokens of English)
    is one-shot: forwarded in its request, stored only as a placeholder. null: only messages
    the client marks are (gateway/core/one_shot.py)."""

    @model_validator(mode="after")
    def _reserve_fits(self) -> ContextConfig:
        if self.reserve_completion_tokens >= self.max_context_tokens:
            raise ValueError("reserve_completion_tokens must be smaller than max_context_tokens")
        if self.compact_to_tokens is not None \
                and self.reserve_completion_tokens >= self.compact_to_tokens:
            raise ValueError("reserve_completion_tokens must be smaller than compact_to_tokens")
        if self.summary_share + self.profile_share + self.recall_share > 1:
            raise ValueError("summary_share + profile_share + recall_share must not exceed 1")
        return self

    def policy(self) -> ContextPolicy:
        fields = self.model_dump(exclude={"one_shot_tool_chars"})
        fields["compact_to_tokens"] = self.compact_to_tokens or 0
        return ContextPolicy(**fields)

    def one_shot(self) -> OneShotPolicy:
        return OneShotPolicy(tool_chars=self.one_shot_tool_chars)


class HeaderConfig(Strict):
    conversation_id: str = "X-Conversation-Id"
    user_id: str = "X-User-Id"
    persist: str = "X-Gateway-Persist"

    @field_validator("*")
    @classmethod
    def _header_name(cls, value: str) -> str:
        if not _HEADER_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not a valid HTTP header name")
        return value


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


def interpolate(value: Any, where: str = "") -> Any:
    """Replace `${NAME}` / `${NAME:-default}` in every string of a parsed YAML document."""
    if isinstance(value, dict):
        return {k: interpolate(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, f"{where}.{i}") for i, v in enumerate(value)]
    if isinstance(value, str):
        def substitute(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in os.environ:
                return os.environ[name]
            if default is not None:
                return default
            raise ConfigError(f"{where}: environment variable {name} is not set")
        return _ENV_REF.sub(substitute, value)
    return value


def _dotted(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc)


def parse_config(data: Any, source: str = "config") -> Config:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping")
    try:
        config = Config.model_validate(interpolate(data))
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            # model_validator errors have an empty loc tail; field errors name the field.
            message = err["msg"].removeprefix("Value error, ")
            lines.append(f"{_dotted(err['loc']) or '(top level)'}: {message}")
        raise ConfigError(f"{source}: invalid configuration\n  " + "\n  ".join(lines)) from None
    config.check_secrets()
    return config


def load_config(path: str | Path) -> Config:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    return parse_config(data, str(path))
