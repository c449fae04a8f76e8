"""HTTP handlers of the user-control API (`/v1/memory/...`). They only translate: authenticate
the tenant, take the user from the tenant's user header, validate, call
`gateway.memory.control.MemoryControl` (reads) or `gateway.memory.erasure.MemoryErasure`
(deletes), serialise. Each handler starts from its `Caller` (`_caller`, `_in_conversation`).

Every request names one user of one tenant (API key + user header) and can only reach that
user's data; the conversation endpoints without a user header reach the tenant's anonymous
conversations (sent without a user id). An admin key (`admin.keys`) may name any tenant, in
`X-Gateway-Tenant`. Bad input is a 4xx in OpenAI's error shape (`gateway.errors`).
The API answers from the store whether or not memory is enabled: what was stored stays
visible, exportable and erasable (`tenant_memory` in the settings says if it is in use).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable

from redis.exceptions import ConnectionError as StoreConnectionError
from redis.exceptions import RedisClusterException
from redis.exceptions import TimeoutError as StoreTimeoutError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from gateway.core.history_import import (ImportConflict, ImportedMessage, ImportProblem,
                                         parse_messages)
from gateway.core.ids import ANONYMOUS_USER, ConversationKey, valid_id
from gateway.errors import BadRequest, Forbidden, GatewayError, NotFound, StoreUnavailable
from gateway.http.door import client_disconnected, read_body
from gateway.memory.control import MemoryControl
from gateway.memory.erasure import MemoryErasure
from gateway.memory.export import Export
from gateway.memory.importing import HistoryImport, ImportErased
from gateway.memory.records.brief_store import BriefStore, brief_json
from gateway.memory.records.pin_store import PinLimitReached
from gateway.memory.records.settings_store import UserSettings
from gateway.pipeline.chat_request import parse_body
from gateway.store.recording.usage import UsageCounters

if TYPE_CHECKING:
    from gateway.http.state import Gateway

logger = logging.getLogger("gateway.memory_api")

STORE_FAILURES = (StoreTimeoutError, StoreConnectionError, RedisClusterException, OSError,
                  TimeoutError)
"""A store that does not answer (in time): the operation is repeated later, never a 500."""

TENANT_HEADER = "X-Gateway-Tenant"
"""Which tenant an admin key acts for (a tenant key may send its own tenant's name)."""
MAX_BODY_BYTES = 4096
"""A settings change is a few bytes (an import has its own limit, MAX_IMPORT_BYTES)."""
MAX_NAME_LENGTH = 256
MAX_IMPORT_BYTES = 16 * 1024 * 1024
"""An import's body at most; a larger history is split in several imports of the same
conversation, oldest first (each skips what is already stored)."""
MAX_IMPORT_MESSAGES = 20_000
DEFAULT_PAGE, MAX_PAGE = 100, 1000
"""Items of a list answer unless `limit` names another number, and at most."""
SETTINGS = ("memory", "auto_extract")
SETTLE_SECONDS = 10.0
"""At most this long a delete waits for a memory run of the same conversation to end."""
DISK_WAIT_SECONDS = 2.0
"""At most this long a delete's answer waits for the store's files to be rewritten (`"disk":
"rewritten"`); past it the answer says "pending" and the rewrite goes on."""


@dataclass(frozen=True, slots=True)
class Caller:
    """Whom a request acts for: one user of one tenant, and the parts that serve them."""
    gateway: Gateway
    tenant: str
    user: str

    def control(self) -> MemoryControl:
        return MemoryControl(self.gateway.store.client, self.gateway.store)

    def erasure(self) -> MemoryErasure:
        settle = min(SETTLE_SECONDS, self.gateway.config.memory.worker.lock_seconds)
        return MemoryErasure(self.gateway.store.client, self.gateway.store,
                             settle_seconds=settle, disk=self.gateway.disk,
                             disk_wait_seconds=DISK_WAIT_SECONDS)

    def usage(self) -> UsageCounters:
        return UsageCounters(self.gateway.store.client, self.gateway.store.keys)

    async def existing(self, key: ConversationKey) -> MemoryControl:
        """The reads, once the conversation is known to exist (404 otherwise)."""
        control = self.control()
        if not await control.exists(key):
            raise _no_conversation(key)
        return control


def _caller(request: Request, *, anonymous: bool = False) -> Caller:
    """Whom the request acts for; 401/400 when the tenant or the user is missing.

    A tenant key reaches its own tenant only (`X-Gateway-Tenant`, if sent, must name it:
    403 otherwise). An admin key reaches any tenant, named in `X-Gateway-Tenant` (required).
    `anonymous`: without a user header the request means the tenant's conversations that were
    sent without a user id (ANONYMOUS_USER, which no header can name) — they belong to the
    tenant, whose key could write to them anyway, so its key (or an admin key) can list and
    delete them."""
    gateway: Gateway = request.app.state.gateway
    authorization = request.headers.get("authorization")
    named = request.headers.get(TENANT_HEADER)
    if gateway.admin.holds(authorization):
        if named is None:
            raise BadRequest(f"An admin key acts for one tenant at a time: name it in the "
                             f"`{TENANT_HEADER}` header.", param=TENANT_HEADER,
                             code="missing_tenant")
        if named not in gateway.config.tenants:
            raise NotFound(f"No tenant `{named}` is configured.", param=TENANT_HEADER,
                           code="tenant_not_found")
        tenant = gateway.tenants.tenant(named)
    else:
        tenant = gateway.tenants.authenticate(authorization)
        if named is not None and named != tenant.name:
            raise Forbidden(f"This API key belongs to another tenant than `{named}`.",
                            param=TENANT_HEADER)
    header = tenant.headers.user_id
    user = request.headers.get(header)
    if user is None and anonymous:
        return Caller(gateway, tenant.name, ANONYMOUS_USER)
    if user is None or not valid_id(user):
        raise BadRequest(f"The `{header}` header is required: 1-128 characters of letters, "
                         "digits and ._@:+=- (starting with a letter or digit).",
                         param=header, code="invalid_user_id")
    return Caller(gateway, tenant.name, user)


def _in_conversation(request: Request, *,
                     anonymous: bool = True) -> tuple[Caller, ConversationKey]:
    """The caller (`_caller`) and the conversation named in the path (400 if its id is not
    valid)."""
    caller = _caller(request, anonymous=anonymous)
    conversation = request.path_params["conversation_id"]
    if not valid_id(conversation):
        raise BadRequest("The conversation id must be 1-128 characters of letters, digits and "
                         "._@:+=- (starting with a letter or digit).",
                         param="conversation_id", code="invalid_id")
    return caller, ConversationKey(caller.tenant, caller.user, conversation)


def _name(request: Request, param: str) -> str:
    value = request.path_params[param]
    if not value or len(value) > MAX_NAME_LENGTH:
        raise BadRequest(f"`{param}` must be 1-{MAX_NAME_LENGTH} characters.", param=param)
    return value


def _listed(items: list[Any], has_more: bool = False) -> JSONResponse:
    """OpenAI's list shape; `last_id` is the cursor of the next page (`?after=`)."""
    return JSONResponse({"object": "list", "data": items,
                         "first_id": items[0]["id"] if items else None,
                         "last_id": items[-1]["id"] if items else None,
                         "has_more": has_more})


def _page(request: Request) -> tuple[int, str | None]:
    """(`limit`, `after`) of a paginated list: 1-MAX_PAGE items (DEFAULT_PAGE unless named),
    those after the id `after`."""
    raw = request.query_params.get("limit")
    if raw is None:
        limit = DEFAULT_PAGE
    elif not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE:
        raise BadRequest(f"`limit` must be an integer from 1 to {MAX_PAGE}.", param="limit")
    else:
        limit = int(raw)
    after = request.query_params.get("after")
    if after is not None and not 1 <= len(after) <= MAX_NAME_LENGTH:
        raise BadRequest(f"`after` must be 1-{MAX_NAME_LENGTH} characters: the `last_id` of "
                         "the page before.", param="after")
    return limit, after


def _paged(items: list[Any], limit: int, after: str | None) -> JSONResponse:
    """A page of `items` (sorted by id) as `_page` asks for it."""
    rest = [item for item in items if after is None or item["id"] > after]
    return _listed(rest[:limit], len(rest) > limit)


def _deleted(kind: str, item_id: str, disk: str | None = None) -> JSONResponse:
    """`disk`: the state of the deleted text's copies on the store's disk, where it had any."""
    body: dict[str, Any] = {"id": item_id, "object": f"memory.{kind}.deleted", "deleted": True}
    if disk is not None:
        body["disk"] = disk
    return JSONResponse(body)


def _settings_json(caller: Caller, settings: UserSettings) -> JSONResponse:
    return JSONResponse({"object": "memory.settings", "memory": settings.memory,
                         "auto_extract": settings.auto_extract,
                         "tenant_memory":
                             caller.gateway.config.tenants[caller.tenant].memory.enabled})


async def _settings_change(request: Request) -> dict[str, bool]:
    # The chat endpoint's rules: bounded also without a Content-Length; depth, encoding,
    # an object.
    body = parse_body(await read_body(request, MAX_BODY_BYTES))
    for name, value in body.items():
        if name not in SETTINGS:
            raise BadRequest(f"Unknown setting `{name}`; known: {', '.join(SETTINGS)}.",
                             param=name)
        if not isinstance(value, bool):
            raise BadRequest(f"`{name}` must be true or false.", param=name)
    return body


async def get_settings(request: Request) -> Response:
    caller = _caller(request)
    return _settings_json(caller, await caller.control().get_settings(caller.tenant,
                                                                      caller.user))


async def patch_settings(request: Request) -> Response:
    caller = _caller(request)
    try:
        change = await _settings_change(request)
    except ClientDisconnect:
        return client_disconnected(request, caller.tenant)
    settings = await caller.control().set_settings(
        caller.tenant, caller.user, memory=change.get("memory"),
        auto_extract=change.get("auto_extract"))
    return _settings_json(caller, settings)


async def list_facts(request: Request) -> Response:
    caller = _caller(request)
    limit, after = _page(request)  # (facts are capped per user: read together, then paged)
    facts = await caller.control().facts_with_sources(caller.tenant, caller.user)
    return _paged([{**f, "id": f["key"]} for f in facts], limit, after)


async def delete_fact(request: Request) -> Response:
    caller = _caller(request)
    key = _name(request, "fact_key")
    disk = await caller.erasure().delete_fact(caller.tenant, caller.user, key)
    if disk is None:
        raise NotFound(f"No fact `{key}` is stored for this user.", param="fact_key")
    return _deleted("fact", key, disk)


async def get_profile(request: Request) -> Response:
    caller = _caller(request)
    return JSONResponse({"object": "memory.profile",
                         **await caller.control().profile(caller.tenant, caller.user)})


async def delete_profile(request: Request) -> Response:
    caller = _caller(request)
    return _deleted("profile", caller.user,
                    await caller.erasure().delete_profile(caller.tenant, caller.user))


async def list_conversations(request: Request) -> Response:
    caller = _caller(request, anonymous=True)
    limit, after = _page(request)
    items, more = await caller.control().conversations(caller.tenant, caller.user,
                                                       limit=limit, after=after)
    return _listed(items, more)


async def get_conversation(request: Request) -> Response:
    caller, key = _in_conversation(request)
    control = await caller.existing(key)
    return await _streamed(Export(control, caller.tenant, caller.user).conversation(key))


async def delete_conversation(request: Request) -> Response:
    caller, key = _in_conversation(request)
    disk = await caller.erasure().delete_conversation(key)
    if disk is None:
        raise _no_conversation(key)
    return _deleted("conversation", key.conversation, disk)


async def get_brief(request: Request) -> Response:
    """What the model is told about the user in this conversation: its memory brief."""
    caller, key = _in_conversation(request)
    control = await caller.existing(key)
    stored = await BriefStore(control.redis, control.keys,
                              encryption=control.store.encryption).get(key)
    return JSONResponse({"object": "memory.brief", "conversation": key.conversation,
                         **(brief_json(stored) or {"content": None, "tokens": 0})})


async def list_chunks(request: Request) -> Response:
    caller, key = _in_conversation(request)
    chunks = await caller.control().chunks_with_sources(key)
    if chunks is None:
        raise _no_conversation(key)
    return _listed(chunks)


async def delete_chunk(request: Request) -> Response:
    caller, key = _in_conversation(request)
    chunk_id = _name(request, "chunk_id")
    disk = await caller.erasure().delete_chunk(key, chunk_id)
    if disk is None:
        raise NotFound(f"No summary chunk `{chunk_id}` in conversation `{key.conversation}`.",
                       param="chunk_id")
    return _deleted("chunk", chunk_id, disk)


async def export(request: Request) -> Response:
    caller = _caller(request)
    document = Export(caller.control(), caller.tenant, caller.user)
    await document.opening()
    return await _streamed(document.body())


async def _streamed(body: AsyncIterator[bytes]) -> StreamingResponse:
    """A JSON document written as it is read. Its first piece is read before the answer
    starts: a store that is down is still a 503 (`_guarded`)."""
    first = await anext(body, b"")

    async def rest() -> AsyncIterator[bytes]:
        # Past the first byte the status is sent: a store failure can only end the body early
        # (its JSON does not parse), logged here rather than as an unhandled ASGI error.
        yield first
        try:
            async for piece in body:
                yield piece
        except STORE_FAILURES as exc:
            logger.warning("memory API answer cut short by the store: %r", exc)

    return StreamingResponse(rest(), media_type="application/json")


async def erase(request: Request) -> Response:
    caller = _caller(request)
    return JSONResponse((await caller.erasure().erase(caller.tenant, caller.user)).to_json())


async def list_pins(request: Request) -> Response:
    caller, key = _in_conversation(request)
    pins = await caller.control().pins(key)
    if pins is None:
        raise _no_conversation(key)
    return _listed(pins)


async def put_pin(request: Request) -> Response:
    caller, key = _in_conversation(request)
    message_id = _name(request, "message_id")
    try:
        pin = await caller.control().pin(key, message_id)
    except PinLimitReached as exc:
        raise GatewayError(f"Not pinned: {exc}; unpin one first.", param="message_id",
                           code="pin_limit_reached", status=409,
                           type="invalid_request_error") from None
    if pin is None:
        raise NotFound(f"No message `{message_id}` in conversation `{key.conversation}`.",
                       param="message_id")
    return JSONResponse(pin)


async def delete_pin(request: Request) -> Response:
    caller, key = _in_conversation(request)
    message_id = _name(request, "message_id")
    if not await caller.control().unpin(key, message_id):
        raise NotFound(f"No pinned message `{message_id}` in conversation "
                       f"`{key.conversation}`.", param="message_id")
    return _deleted("pin", message_id)


async def list_topics(request: Request) -> Response:
    caller, key = _in_conversation(request)
    topics = await caller.control().topics(key)
    if topics is None:
        raise _no_conversation(key)
    return JSONResponse(topics)


async def get_usage(request: Request) -> Response:
    """The user's usage over all their conversations (docs/user-control-api.md#usage)."""
    caller = _caller(request, anonymous=True)
    usage = await caller.usage().user(caller.tenant, caller.user)
    return JSONResponse({"object": "memory.usage", "user": caller.user, **usage.as_json()})


async def get_tenant_usage(request: Request) -> Response:
    """The tenant's usage over all its users (recorded turns; docs/operating.md)."""
    caller = _caller(request, anonymous=True)
    usage = await caller.usage().tenant(caller.tenant)
    return JSONResponse({"object": "usage", "tenant": caller.tenant, **usage.as_json()})


async def get_conversation_usage(request: Request) -> Response:
    """One conversation's usage; 404 if it is not stored (nor ever counted)."""
    caller, key = _in_conversation(request)
    usage = await caller.usage().conversation(key)
    if not usage.counters["requests"] and not await caller.control().exists(key):
        raise _no_conversation(key)
    return JSONResponse({"object": "memory.conversation.usage",
                         "conversation": key.conversation, **usage.as_json()})


async def import_conversation(request: Request) -> Response:
    """Messages with their times appended to the conversation as if recorded live
    (docs/user-control-api.md#import); idempotent."""
    caller, key = _in_conversation(request, anonymous=False)
    gateway = caller.gateway
    try:
        raw = await read_body(request, MAX_IMPORT_BYTES)
    except ClientDisconnect:
        return client_disconnected(request, caller.tenant)
    inline = gateway.pipeline.inline_recorder
    importer = HistoryImport(gateway.store,
                             apply=inline.process_available if inline is not None else None)
    off_loop = gateway.pipeline.off_loop
    try:
        messages = await off_loop.run("import_parse", _imported, raw) \
            if off_loop.large_body(len(raw)) else _imported(raw)
        result = await importer.run(key, messages)
    except ImportProblem as exc:
        raise BadRequest(f"Not imported: {exc}", param=exc.param) from None
    except ImportConflict as exc:
        raise GatewayError(f"Not imported: conversation `{key.conversation}` already holds "
                           f"other messages (they differ from the import at message "
                           f"{exc.position}); import into a new conversation id.",
                           param=f"messages[{exc.position}]", code="conversation_differs",
                           status=409, type="invalid_request_error") from None
    except ImportErased:
        raise GatewayError("Not imported: this user's memory was erased (or the conversation "
                           "deleted) after some of these messages were written; they would "
                           "not be kept.", param="messages", code="erased_after_messages",
                           status=409, type="invalid_request_error") from None
    return JSONResponse(result.to_json())


def _imported(raw: bytes) -> tuple[ImportedMessage, ...]:
    """An import body's messages, checked (BadRequest, ImportProblem)."""
    body = parse_body(raw)
    if unknown := sorted(set(body) - {"messages"}):
        raise BadRequest(f"Unknown field `{unknown[0]}`; an import has `messages`.",
                         param=unknown[0])
    return parse_messages(body.get("messages"), limit=MAX_IMPORT_MESSAGES)


def _no_conversation(key: ConversationKey) -> NotFound:
    return NotFound(f"No conversation `{key.conversation}` is stored for this user.",
                    param="conversation_id")


def _guarded(handler: Callable[[Request], Awaitable[Response]]
             ) -> Callable[[Request], Awaitable[Response]]:
    """`handler`, answering a store that does not answer (in time) with a 503 and
    Retry-After instead of a 500. Every operation here is safe to repeat: reads; deletes that
    find nothing left the second time (an erase repeated goes on from where it stopped)."""
    @functools.wraps(handler)
    async def guarded(request: Request) -> Response:
        try:
            return await handler(request)
        except STORE_FAILURES as exc:
            logger.warning("memory API %s %s: the store failed (%r)", request.method,
                           request.url.path, exc)
            raise StoreUnavailable("The store did not answer in time; nothing is lost. "
                                   "Repeat the request (it is safe to repeat).") from None
    return guarded


_CONVERSATION = "/v1/memory/conversations/{conversation_id}"

memory_routes = [
    Route("/v1/memory/settings", _guarded(get_settings), methods=["GET"]),
    Route("/v1/memory/settings", _guarded(patch_settings), methods=["PATCH"]),
    Route("/v1/memory/facts", _guarded(list_facts), methods=["GET"]),
    Route("/v1/memory/facts/{fact_key}", _guarded(delete_fact), methods=["DELETE"]),
    Route("/v1/memory/profile", _guarded(get_profile), methods=["GET"]),
    Route("/v1/memory/profile", _guarded(delete_profile), methods=["DELETE"]),
    Route("/v1/memory/conversations", _guarded(list_conversations), methods=["GET"]),
    Route(_CONVERSATION, _guarded(get_conversation), methods=["GET"]),
    Route(_CONVERSATION, _guarded(delete_conversation), methods=["DELETE"]),
    Route(_CONVERSATION + "/brief", _guarded(get_brief), methods=["GET"]),
    Route(_CONVERSATION + "/chunks", _guarded(list_chunks), methods=["GET"]),
    Route(_CONVERSATION + "/chunks/{chunk_id}", _guarded(delete_chunk), methods=["DELETE"]),
    Route("/v1/memory/export", _guarded(export), methods=["GET"]),
    Route("/v1/memory", _guarded(erase), methods=["DELETE"]),
    Route(_CONVERSATION + "/topics", _guarded(list_topics), methods=["GET"]),
    Route("/v1/memory/usage", _guarded(get_usage), methods=["GET"]),
    Route("/v1/usage", _guarded(get_tenant_usage), methods=["GET"]),
    Route(_CONVERSATION + "/usage", _guarded(get_conversation_usage), methods=["GET"]),
    Route(_CONVERSATION + "/import", _guarded(import_conversation), methods=["POST"]),
    Route(_CONVERSATION + "/pins", _guarded(list_pins), methods=["GET"]),
    Route(_CONVERSATION + "/pins/{message_id}", _guarded(put_pin), methods=["PUT"]),
    Route(_CONVERSATION + "/pins/{message_id}", _guarded(delete_pin), methods=["DELETE"]),
]
