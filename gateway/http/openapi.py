"""The OpenAPI 3.1 description of the gateway's own endpoints, served at `/openapi.json`.

It describes what the gateway itself accepts and answers — the chat endpoint as the subset of
OpenAI's request the gateway validates (everything else passes through to the upstream), the
Anthropic Messages and OpenAI Responses doors likewise, the model list, health, metrics and the
user-control API — so clients can generate code against it and `schemathesis` can fuzz every
operation (tests/integration/test_openapi.py). Every error is OpenAI's error shape, but the
Messages door's, which are Anthropic's.
"""

from __future__ import annotations

from typing import Any

from gateway.core.dialects.marks import EXTENSION_PREFIX
from gateway.core.dialects.responses import ACCEPTED as RESPONSES_ACCEPTED
from gateway.core.dialects.responses import REFUSED as RESPONSES_REFUSED
from gateway.pipeline.chat_fields import BODY_FIELDS, ITEM_TYPES

Json = dict[str, Any]

_ERROR: Json = {
    "type": "object", "required": ["error"],
    "properties": {"error": {
        "type": "object", "required": ["message", "type", "param", "code"],
        "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                       "param": {"type": ["string", "null"]},
                       "code": {"type": ["string", "null"]}}}},
}
_ANTHROPIC_ERROR: Json = {
    "type": "object", "required": ["type", "error"],
    "properties": {"type": {"const": "error"}, "error": {
        "type": "object", "required": ["type", "message"],
        "properties": {"type": {"type": "string"}, "message": {"type": "string"}}}},
}
_ID = {"type": "string", "minLength": 1, "maxLength": 128,
       "pattern": "^[A-Za-z0-9][A-Za-z0-9._@:+=-]*$"}
_MESSAGE: Json = {
    "type": "object", "required": ["role"],
    "properties": {
        "role": {"enum": ["system", "developer", "user", "assistant", "tool", "function"]},
        "content": {"oneOf": [
            {"type": "string"}, {"type": "null"},
            {"type": "array", "items": {"type": "object", "required": ["type"],
                                        "properties": {"type": {"type": "string"},
                                                       "text": {"type": "string"}}}}]},
        "name": {"type": "string"},
        "tool_call_id": {"type": "string"},
        "tool_calls": {"type": "array", "items": {"type": "object"}},
        "x_gateway_one_shot": {
            "type": "boolean",
            "description": "Forward this message in this request only; store a placeholder."},
        "x_gateway_pin": {
            "type": "boolean",
            "description": "Pin this message: forwarded in the pinned block on every later "
                           "request of the conversation, never shortened."},
    },
    # As the gateway checks it: a content, unless an assistant's message carries tool calls
    # (or a function call), and a tool's message names the call it answers.
    "anyOf": [{"required": ["content"], "properties": {"content": {"not": {"type": "null"}}}},
              {"required": ["tool_calls"], "properties": {
                  "role": {"const": "assistant"}, "tool_calls": {"minItems": 1}}},
              {"required": ["function_call"], "properties": {
                  "role": {"enum": ["assistant", "function"]},
                  "function_call": {"type": "object", "minProperties": 1}}}],
    "if": {"properties": {"role": {"const": "tool"}}},
    "then": {"required": ["tool_call_id"]},
}
def _typed_fields() -> Json:
    """OpenAI's request fields as the gateway checks their JSON types (chat_fields.py)."""
    fields: Json = {name: {"type": sorted(types)} for name, types in BODY_FIELDS.items()}
    for name, items in ITEM_TYPES.items():
        fields[name]["items"] = {"type": sorted(items)}
    return fields


_CHAT_REQUEST: Json = {
    "type": "object", "required": ["model", "messages"],
    "properties": {
        **_typed_fields(),
        # The gateway refuses an empty model (no tenant has an alias ""): so does the schema.
        "model": {"type": "string", "minLength": 1,
                  "description": "A model alias of the tenant."},
        "messages": {"type": "array", "minItems": 1,
                     "items": {"$ref": "#/components/schemas/Message"}},
        "stream": {"type": "boolean"},
        "stream_options": {"type": ["object", "null"]},
        "user": {"type": "string", "description": "The end user, if no user header is sent."},
        "conversation_id": _ID,
    },
    "additionalProperties": True,
}


_MODEL = {"type": "string", "minLength": 1, "description": "A model alias of the tenant."}
_MESSAGES_REQUEST: Json = {
    "type": "object", "required": ["model", "max_tokens", "messages"],
    "properties": {
        "model": _MODEL,
        "max_tokens": {"type": "integer", "minimum": 1},
        "messages": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["role", "content"],
            "properties": {"role": {"enum": ["user", "assistant", "system"]},
                           "content": {"oneOf": [
                               {"type": "string"},
                               {"type": "array", "items": {
                                   "type": "object", "required": ["type"],
                                   "properties": {"type": {"type": "string"},
                                                  "text": {"type": "string"}}}}]}}}},
        "system": {"oneOf": [{"type": "string"}, {"type": "array"}]},
        "stream": {"type": "boolean"},
    },
    "additionalProperties": True,
}
_RESPONSES_REQUEST: Json = {
    "type": "object", "required": ["model", "input"],
    "properties": {
        **{name: {} for name in sorted(RESPONSES_ACCEPTED)},
        # Refused by name unless null or false (gateway/core/dialects/responses.py).
        **{name: {"enum": [None, False]} for name in sorted(RESPONSES_REFUSED)},
        "model": _MODEL,
        "input": {"oneOf": [{"type": "string"},
                            {"type": "array", "minItems": 1, "items": {"type": "object"}}]},
        "instructions": {"type": ["string", "null"]},
        "previous_response_id": {"type": ["string", "null"]},
        "store": {"type": ["boolean", "null"]},
        "stream": {"type": ["boolean", "null"]},
        "user": {"type": ["string", "null"]},
    },
    # Any other field is refused ("Unrecognized request argument"), but extensions (`x_…`).
    "patternProperties": {f"^{EXTENSION_PREFIX}": {}},
    "additionalProperties": False,
}


def _errors(*statuses: int, schema: str = "Error") -> Json:
    reasons = {400: "Bad request", 401: "Missing or unknown API key", 403: "Forbidden",
               404: "Not found", 405: "Method not allowed", 409: "Conflict",
               413: "Body too large",
               429: "Rate limited (upstream or the tenant's limit)", 500: "Upstream error",
               502: "Upstream unreachable",
               503: "The store did not answer in time: repeat it after Retry-After seconds",
               504: "Upstream timed out"}
    return {str(s): {"description": reasons[s], "content": {
        "application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}}
        for s in statuses}


def _ok(schema: Json | None = None, description: str = "OK") -> Json:
    return {"200": {"description": description, "content": {
        "application/json": {"schema": schema or {"type": "object"}}}}}


_USER = {"name": "X-User-Id", "in": "header", "required": True, "schema": _ID,
         "description": "The end user (the tenant may name another header)."}
_CONVERSATION = {"name": "conversation_id", "in": "path", "required": True, "schema": _ID}
_PAGING = (
    {"name": "limit", "in": "query", "required": False,
     "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
     "description": "Items in the page (100 unless named)."},
    {"name": "after", "in": "query", "required": False,
     "schema": {"type": "string", "minLength": 1, "maxLength": 256},
     "description": "The `last_id` of the page before: the items after it."})
_IMPORT = {
    "type": "object", "required": ["messages"], "additionalProperties": False,
    "properties": {"messages": {"type": "array", "minItems": 1, "maxItems": 20_000, "items": {
        "type": "object", "required": ["role", "content", "created_at"],
        "additionalProperties": False,
        "properties": {
            "role": {"enum": ["user", "assistant"]},
            "content": {"oneOf": [{"type": "string"}, {
                "type": "array", "minItems": 1, "items": {
                    "type": "object", "required": ["type", "text"],
                    "additionalProperties": False,
                    "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}}]},
            "created_at": {"oneOf": [
                {"type": "number", "minimum": 0, "maximum": 253_402_300_799,
                 "description": "Epoch seconds"},
                {"type": "string", "description": "ISO 8601 (UTC unless it names an offset)"}]},
            "name": {"type": "string", "minLength": 1, "maxLength": 64}}}}}}
"""An import's body (gateway/core/history_import.py checks the same)."""
_MESSAGE_ID = {"name": "message_id", "in": "path", "required": True,
               "schema": {"type": "string", "minLength": 1, "maxLength": 256}}


def _memory(summary: str, *, path: tuple[Json, ...] = (), body: Json | None = None,
            not_found: bool = False, anonymous: bool = False) -> Json:
    """`anonymous`: without the user header, the tenant's conversations sent without one."""
    user = {**_USER, "required": False} if anonymous else _USER
    operation: Json = {"summary": summary, "security": [{"tenantKey": []}],
                       "parameters": [user, *path],
                       "responses": {**_ok(), **_errors(400, 401, *((404,) if not_found else ()),
                                                       413, 503)}}
    if body is not None:
        operation["requestBody"] = {"required": True,
                                    "content": {"application/json": {"schema": body}}}
    return operation


def openapi() -> Json:
    """The document (a fresh dict each call)."""
    conversation = "/v1/memory/conversations/{conversation_id}"
    settings = {"type": "object", "properties": {"memory": {"type": "boolean"},
                                                 "auto_extract": {"type": "boolean"}},
                "additionalProperties": False}
    chat = {
        "summary": "Chat completion, with the conversation's memory (OpenAI-compatible)",
        "security": [{"tenantKey": []}],
        "parameters": [
            {"name": "X-Conversation-Id", "in": "header", "required": False, "schema": _ID},
            {**_USER, "required": False},
            {"name": "X-Request-Id", "in": "header", "required": False,
             "schema": {"type": "string", "maxLength": 200}}],
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/ChatCompletionRequest"}}}},
        "responses": {"200": {"description": "The upstream's answer, unchanged", "content": {
            "application/json": {"schema": {"type": "object"}},
            "text/event-stream": {"schema": {"type": "string"}}}},
            **_errors(400, 401, 404, 413, 429, 500, 502, 504)},
    }
    answered = {"description": "The upstream's answer, in the door's dialect", "content": {
        "application/json": {"schema": {"type": "object"}},
        "text/event-stream": {"schema": {"type": "string"}}}}
    identity = [{"name": "X-Conversation-Id", "in": "header", "required": False, "schema": _ID},
                {**_USER, "required": False}]
    messages = {
        "summary": "Anthropic Messages, with the conversation's memory",
        "security": [{"anthropicKey": []}, {"tenantKey": []}],
        "parameters": identity,
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/MessagesRequest"}}}},
        "responses": {"200": answered, **_errors(400, 401, 404, 413, 429, 500, 502, 503, 504,
                                                 schema="AnthropicError")},
    }
    count_tokens = {
        "summary": "The prompt's tokens as the gateway counts them (Anthropic's count_tokens)",
        "security": [{"anthropicKey": []}, {"tenantKey": []}],
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": {**_MESSAGES_REQUEST, "required": ["model", "messages"]}}}},
        "responses": {**_ok(), **_errors(400, 401, 404, 413, schema="AnthropicError")},
    }
    responses = {
        "summary": "OpenAI Responses, with the conversation's memory",
        "security": [{"tenantKey": []}],
        "parameters": identity,
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/ResponsesRequest"}}}},
        "responses": {"200": answered,
                      **_errors(400, 401, 404, 413, 429, 500, 502, 503, 504)},
    }
    stored_response = {
        "summary": "A stored response of the caller's user",
        "security": [{"tenantKey": []}],
        "parameters": [{**_USER, "required": False},
                       {"name": "response_id", "in": "path", "required": True,
                        "schema": {"type": "string", "minLength": 1, "maxLength": 256}}],
        "responses": {**_ok(), **_errors(401, 404, 503)},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "Context Gateway", "version": "1",
                 "description": "An OpenAI-compatible gateway that gives chat applications "
                                "memory. Errors use OpenAI's error shape."},
        "components": {
            "securitySchemes": {"tenantKey": {"type": "http", "scheme": "bearer"},
                                "anthropicKey": {"type": "apiKey", "in": "header",
                                                 "name": "x-api-key"}},
            "schemas": {"Error": _ERROR, "AnthropicError": _ANTHROPIC_ERROR,
                        "Message": _MESSAGE, "ChatCompletionRequest": _CHAT_REQUEST,
                        "MessagesRequest": _MESSAGES_REQUEST,
                        "ResponsesRequest": _RESPONSES_REQUEST},
        },
        "paths": {
            "/v1/chat/completions": {"post": chat},
            "/v1/messages": {"post": messages},
            "/v1/messages/count_tokens": {"post": count_tokens},
            "/v1/responses": {"post": responses},
            "/v1/responses/{response_id}": {"get": stored_response},
            "/v1/models": {"get": {"summary": "The tenant's model aliases",
                                   "security": [{"tenantKey": []}],
                                   "responses": {**_ok(), **_errors(401)}}},
            "/healthz": {"get": {"summary": "The process is up", "responses": _ok()}},
            "/readyz": {"get": {"summary": "The store answers", "responses": {
                **_ok(), "503": {"description": "The store does not answer"}}}},
            "/v1/memory/settings": {
                "get": _memory("The user's memory switches"),
                "patch": _memory("Change the user's memory switches", body=settings)},
            "/v1/memory/facts": {"get": _memory("The user's facts with their sources, a page "
                                                "at a time", path=_PAGING)},
            "/v1/memory/facts/{fact_key}": {"delete": _memory(
                "Forget one fact", not_found=True,
                path=({"name": "fact_key", "in": "path", "required": True,
                       "schema": {"type": "string", "minLength": 1, "maxLength": 256}},))},
            "/v1/memory/profile": {"get": _memory("The learned profile"),
                                   "delete": _memory("Forget the learned profile")},
            "/v1/memory/conversations": {"get": _memory("The user's conversations, a page at "
                                                        "a time", path=_PAGING,
                                                        anonymous=True)},
            conversation: {
                "get": _memory("A transcript and its branches", path=(_CONVERSATION,),
                               not_found=True, anonymous=True),
                "delete": _memory("Delete a conversation and what memory owes to it",
                                  path=(_CONVERSATION,), not_found=True, anonymous=True)},
            conversation + "/brief": {"get": _memory(
                "The conversation's memory brief: what the model is told about the user",
                path=(_CONVERSATION,), not_found=True, anonymous=True)},
            conversation + "/chunks": {"get": _memory(
                "Summary chunks with their sources", path=(_CONVERSATION,), not_found=True,
                anonymous=True)},
            conversation + "/chunks/{chunk_id}": {"delete": _memory(
                "Forget one summary chunk", not_found=True, anonymous=True, path=(
                    _CONVERSATION, {"name": "chunk_id", "in": "path", "required": True,
                                    "schema": {"type": "string", "minLength": 1,
                                               "maxLength": 256}}))},
            conversation + "/topics": {"get": _memory(
                "The conversation's current topic and its topics so far, oldest first",
                path=(_CONVERSATION,), not_found=True, anonymous=True)},
            conversation + "/import": {"post": {
                **_memory("Import messages with their times, as if recorded live (idempotent)",
                          path=(_CONVERSATION,), body=_IMPORT),
                "responses": {**_ok(), **_errors(400, 401, 403, 409, 413, 503)}}},
            conversation + "/pins": {"get": _memory(
                "The conversation's pinned messages, oldest first", path=(_CONVERSATION,),
                not_found=True)},
            conversation + "/pins/{message_id}": {
                "put": {**_memory("Pin a stored message of the conversation", not_found=True,
                                  path=(_CONVERSATION, _MESSAGE_ID)),
                        "responses": {**_ok(), **_errors(400, 401, 404, 409, 413, 503)}},
                "delete": _memory("Unpin a message", not_found=True,
                                  path=(_CONVERSATION, _MESSAGE_ID))},
            "/v1/usage": {"get": {**_memory(
                "The tenant's requests, tokens and spend over all its users"),
                "parameters": []}},
            "/v1/memory/usage": {"get": _memory(
                "The user's requests, tokens and spend over all their conversations",
                anonymous=True)},
            conversation + "/usage": {"get": _memory(
                "The conversation's requests, tokens and spend", path=(_CONVERSATION,),
                not_found=True, anonymous=True)},
            "/v1/memory/export": {"get": _memory("Everything kept of the user")},
            "/v1/memory": {"delete": _memory("Erase the user")},
        },
    }
