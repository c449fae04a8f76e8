"""One error hierarchy, rendered in one place as OpenAI's error body with the right status."""

from __future__ import annotations

import logging
from typing import Any


class GatewayError(Exception):
    status: int = 500
    type: str = "api_error"
    code: str | None = None
    log_level: int = logging.ERROR

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None,
                 status: int | None = None, type: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        if type is not None:
            self.type = type

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}

    def headers(self) -> dict[str, str]:
        """Response headers this error brings (Retry-After of a 429)."""
        return {}


class BadRequest(GatewayError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request"
    log_level = logging.INFO


class Unauthorized(GatewayError):
    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"
    log_level = logging.INFO


class Forbidden(GatewayError):
    status = 403
    type = "invalid_request_error"
    code = "insufficient_permissions"
    log_level = logging.INFO


class ModelNotFound(GatewayError):
    status = 404
    type = "invalid_request_error"
    code = "model_not_found"
    log_level = logging.INFO


class NotFound(GatewayError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"
    log_level = logging.INFO


class RateLimited(GatewayError):
    """Over a rate limit: OpenAI's shape (`type` is `requests` or `tokens`), with Retry-After
    in seconds when waiting helps (not when one request alone exceeds the limit)."""

    status = 429
    code = "rate_limit_exceeded"
    log_level = logging.INFO

    def __init__(self, message: str, *, kind: str, retry_after: int | None = None):
        super().__init__(message, type=kind)
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        return {} if self.retry_after is None else {"retry-after": str(self.retry_after)}


class PayloadTooLarge(GatewayError):
    status = 413
    type = "invalid_request_error"
    code = "payload_too_large"
    log_level = logging.INFO


class StoreUnavailable(GatewayError):
    """The store did not answer in time (or at all) on a path that cannot fail open (the
    memory API): 503, and Retry-After — every such operation is safe to repeat."""

    status = 503
    type = "api_error"
    code = "store_unavailable"
    log_level = logging.WARNING
    retry_after = 1

    def headers(self) -> dict[str, str]:
        return {"retry-after": str(self.retry_after)}


class UpstreamError(GatewayError):
    """The upstream answered with an error, or could not be reached (502) or timed out (504).

    `upstream_body` is the upstream's own error body when it sent one in OpenAI's shape; it is
    returned to the client as is, so the client sees what it would have seen going direct.
    """

    status = 502
    type = "upstream_error"
    code = "upstream_error"
    log_level = logging.WARNING

    def __init__(self, message: str, *, status: int = 502, upstream_body: dict | None = None,
                 code: str | None = None, type: str | None = None):
        super().__init__(message, status=status, code=code, type=type)
        self.upstream_body = upstream_body

    def body(self) -> dict[str, Any]:
        if self.upstream_body and isinstance(self.upstream_body.get("error"), dict):
            return self.upstream_body
        return super().body()


class UpstreamTimeout(UpstreamError):
    def __init__(self, message: str = "The upstream model did not answer in time."):
        super().__init__(message, status=504, code="upstream_timeout", type="timeout_error")


class ConfigError(Exception):
    """A bad config file; the message names the dotted key and why."""
