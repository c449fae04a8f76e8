"""What a chat request carries and may carry: the HTTP headers that name its conversation, user
and persist flag (`tenants.<name>.headers:`), and its size limits (`request_limits:`, and a
tenant's overrides)."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from gateway.config.strict import Strict

_HEADER_NAME = re.compile(r"[A-Za-z0-9-]+")


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


class RequestLimitsConfig(Strict):
    """What one chat request may carry; a request beyond a limit gets a 400 in its door's error
    shape naming the field (`messages`, `messages[3].content`; `input[3].content`;
    `messages.3.content`), before anything else reads it."""

    max_messages: int = Field(2048, ge=1, le=1_000_000)
    """Messages per request (OpenAI's own API allows 2,048)."""
    max_message_chars: int = Field(1_000_000, ge=1)
    """Characters of one message's text (its string content, or its text parts together).
    Characters, not tokens: counted by `len` before the request is validated, with no
    tokenizer. (why: docs/decisions.md#max_message_chars-counts-characters-gatewayconfigrequestpy)"""
    max_stored_messages: int = Field(10_000, ge=4, le=10_000_000)
    """Messages of a conversation kept in its live transcript (what every request loads and
    reconciles). Beyond it the oldest are not refused and never lost: once memory has indexed
    and compacted them they move to the conversation's archive (still recalled, exported and
    erased with it). A request whose new messages alone exceed it gets a 400 (`messages`)."""
