"""What operators use to watch the gateway: the memory console and OpenTelemetry tracing."""

from __future__ import annotations

from pydantic import Field, field_validator

from gateway.config.extras import missing_tracing_packages
from gateway.config.strict import Strict, required_env


class ConsoleConfig(Strict):
    """The memory console (`/console`, gateway/http/console/): HTML pages for operators signed in
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


class TracingConfig(Strict):
    """OpenTelemetry spans for requests and memory jobs, exported over OTLP/HTTP
    (gateway/ops/tracing.py). Off: nothing of OpenTelemetry is even imported."""

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
        missing = missing_tracing_packages() if value else []
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
        return required_env(self.headers_env, "tracing.headers_env")
