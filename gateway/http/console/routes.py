"""The console's HTTP handlers: sign in and out, read pages, and the few POST actions.

Security rules every handler follows (tested in tests/integration/test_console_http.py):
- a page needs a live session (else a redirect to the sign-in page); a POST needs one too,
  and the session's CSRF token in its form, and no cross-site origin (else 403);
- templates autoescape everything (Jinja2, `autoescape=True`), and every page is sent with a
  Content-Security-Policy that allows no inline script, so stored text is only ever text;
- no memory content in a URL: actions are POST forms whose bodies carry what they act on
  (a fact key); URLs carry tenant, user and conversation ids only.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable
from urllib.parse import parse_qsl, quote, urlsplit

from jinja2 import Environment, FileSystemLoader
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from gateway.core.ids import ConversationKey, valid_id
from gateway.http.console.chart import spend_chart, token_chart
from gateway.http.console.session import COOKIE, COOKIE_PATH, Session, SessionStore
from gateway.http.console.views import (
    conversation_view,
    find_conversation,
    request_log,
    user_view,
    users_page,
)
from gateway.memory.control import MemoryControl
from gateway.memory.erasure import MemoryErasure
from gateway.memory.export import Export
from gateway.memory.records.brief_store import BriefStore
from gateway.memory.records.facts_store import FactStore

if TYPE_CHECKING:
    from gateway.http.state import Gateway

HERE = Path(__file__).parent
MAX_FORM_BYTES = 16_384
MAX_FACT_VALUE = 1000
REQUESTS_SHOWN = 100
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self'; form-action 'self'; frame-ancestors 'none'; "
                               "base-uri 'none'",
    "x-content-type-options": "nosniff",
    # same-origin, not no-referrer: under no-referrer a browser sends `Origin: null` with its
    # own form posts, and the origin check could not tell them from forged ones.
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


class ConsoleError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class Console:
    """The console's pages; one per app (its template environment is built once)."""

    def __init__(self) -> None:
        self.templates = Environment(loader=FileSystemLoader(HERE / "templates"),
                                     autoescape=True)
        self.templates.filters["when"] = _when

    # -- plumbing ----------------------------------------------------------------------------

    def render(self, request: Request, template: str, status: int = 200,
               session: Session | None = None, **context: Any) -> HTMLResponse:
        html = self.templates.get_template(template).render(
            session=session, csrf=session.csrf if session else "", **context)
        return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)

    def page(self, handler: Callable[[Request, Gateway, Session], Awaitable[Response]],
             *, post: bool = False) -> Callable[[Request], Awaitable[Response]]:
        """A handler run with the request's session (pages) or its checked form (POST)."""
        async def endpoint(request: Request) -> Response:
            gateway: Gateway = request.app.state.gateway
            session = await _sessions(gateway).get(request.cookies.get(COOKIE))
            try:
                if post:
                    _check_origin(request)
                    if session is None:
                        raise ConsoleError(403, "Not signed in (or the session expired).")
                    form = await _form(request)
                    if not session.check_csrf(form.get("csrf")):
                        raise ConsoleError(403, "The form's CSRF token is missing or wrong: "
                                                "reload the page and try again.")
                    request.state.form = form
                elif session is None:
                    return RedirectResponse("/console/login", status_code=303)
                return await handler(request, gateway, session)
            except ConsoleError as exc:
                return self.render(request, "error.html", exc.status, session,
                                   message=exc.message)
        return endpoint

    # -- sign in and out ---------------------------------------------------------------------

    async def login_form(self, request: Request) -> Response:
        return self.render(request, "login.html")

    async def login(self, request: Request) -> Response:
        gateway: Gateway = request.app.state.gateway
        try:
            _check_origin(request)
            key = (await _form(request)).get("key", "").strip()
        except ConsoleError as exc:
            return self.render(request, "login.html", exc.status, message=exc.message)
        # The same answer for a tenant key and a wrong key: the form tells nothing more.
        if not key or not gateway.admin.holds(f"Bearer {key}"):
            return self.render(request, "login.html", 401, message="That is not an admin key.")
        session = await _sessions(gateway).create()
        response = RedirectResponse("/console", status_code=303)
        response.set_cookie(COOKIE, session.id, max_age=gateway.config.console.session_ttl_seconds,
                            path=COOKIE_PATH, httponly=True, samesite="strict",
                            secure=gateway.config.console.secure_cookie)
        return response

    async def logout(self, request: Request, gateway: Gateway, session: Session) -> Response:
        await _sessions(gateway).delete(session.id)
        response = RedirectResponse("/console/login", status_code=303)
        response.delete_cookie(COOKIE, path=COOKIE_PATH)
        return response

    # -- pages -------------------------------------------------------------------------------

    async def tenants(self, request: Request, gateway: Gateway, session: Session) -> Response:
        tenants = [{"name": name, "memory": t.memory.enabled}
                   for name, t in sorted(gateway.config.tenants.items())]
        return self.render(request, "tenants.html", session=session, tenants=tenants)

    async def tenant(self, request: Request, gateway: Gateway, session: Session) -> Response:
        tenant = _tenant(request, gateway)
        cursor = request.query_params.get("cursor", "0")
        if not cursor.isdigit():
            raise ConsoleError(400, "The page cursor must be a number.")
        conversation = request.query_params.get("conversation")
        found = None
        if conversation:
            _check_id(conversation, "conversation id")
            found = await find_conversation(gateway.store.client, gateway.store.keys, tenant,
                                            conversation)
        page = await users_page(gateway.store.client, gateway.store.keys, tenant, int(cursor))
        return self.render(request, "tenant.html", session=session, tenant=tenant, page=page,
                           conversation=conversation, found=found)

    async def requests(self, request: Request, gateway: Gateway, session: Session) -> Response:
        tenant = _tenant(request, gateway)
        entries = await request_log(gateway.store.client, gateway.store.keys, tenant,
                                    REQUESTS_SHOWN)
        return self.render(request, "requests.html", session=session, tenant=tenant,
                           entries=entries, chart=token_chart(entries),
                           spend=spend_chart(entries))

    async def user(self, request: Request, gateway: Gateway, session: Session) -> Response:
        tenant, user = _tenant(request, gateway), _user(request)
        view = await user_view(_control(gateway), tenant, user)
        return self.render(request, "user.html", session=session, tenant=tenant, user=user,
                           can_edit=gateway.memory is not None, **view)

    async def conversation(self, request: Request, gateway: Gateway,
                           session: Session) -> Response:
        key = _conversation(request, gateway)
        view = await conversation_view(_control(gateway), gateway.store.client, key)
        if view is None:
            raise ConsoleError(404, "No such conversation is stored for this user.")
        return self.render(request, "conversation.html", session=session, tenant=key.tenant,
                           user=key.user, conversation=key.conversation, view=view)

    async def export(self, request: Request, gateway: Gateway, session: Session) -> Response:
        tenant, user = _tenant(request, gateway), _user(request)
        document = Export(_control(gateway), tenant, user)  # streamed: any size, constant memory
        await document.opening()
        return StreamingResponse(document.body(), media_type="application/json", headers={
            **SECURITY_HEADERS,
            "content-disposition": f'attachment; filename="memory-{tenant}-{user}.json"'})

    # -- actions (POST) ----------------------------------------------------------------------

    async def delete_fact(self, request: Request, gateway: Gateway, session: Session) -> Response:
        tenant, user = _tenant(request, gateway), _user(request)
        fact = request.state.form.get("key", "")
        if not await _erasure(gateway).delete_fact(tenant, user, fact):
            raise ConsoleError(404, "No such fact is stored for this user.")
        return _back_to_user(tenant, user)

    async def edit_fact(self, request: Request, gateway: Gateway, session: Session) -> Response:
        """A new value for a fact (its old one goes to its history); re-embedded with the
        serving process's embedder, so recall finds it by its new meaning at once."""
        tenant, user = _tenant(request, gateway), _user(request)
        form = request.state.form
        value = form.get("value", "").strip()
        if not value or len(value) > MAX_FACT_VALUE:
            raise ConsoleError(400, f"A fact's value is 1-{MAX_FACT_VALUE} characters.")
        if gateway.memory is None:
            raise ConsoleError(409, "Facts can be edited only while memory is enabled for a "
                                    "tenant (an edited fact is embedded again).")
        control = _control(gateway)
        old = await control.facts.get(tenant, user, form.get("key", ""))
        if old is None:
            raise ConsoleError(404, "No such fact is stored for this user.")
        # The tenant's own fact store when its memory is on (its policy, its key); else one
        # with the serving process's embedder — sealed with the tenant's key either way.
        facts = gateway.memory.service.facts.get(tenant) or FactStore(
            gateway.store.client, control.keys, gateway.memory.search.embedding.embed,
            encryption=gateway.store.encryption)
        # Stated by an operator: certain, and resting on no message of the user.
        await facts.upsert(tenant, user, [dataclasses.replace(
            old, value=value, confidence=1.0, source_ids=())])
        # The user's conversations' memory briefs are made again, with the new value.
        await BriefStore(control.redis, control.keys).forget(
            [ConversationKey(tenant, user, c) for c in await control.conversation_ids(tenant,
                                                                                     user)])
        return _back_to_user(tenant, user)

    async def erase_user(self, request: Request, gateway: Gateway, session: Session) -> Response:
        tenant, user = _tenant(request, gateway), _user(request)
        if request.state.form.get("confirm") != user:
            raise ConsoleError(400, "Not erased: type the user id to confirm.")
        await _erasure(gateway).erase(tenant, user)
        return RedirectResponse(f"/console/t/{quote(tenant)}?erased=1", status_code=303)

    async def delete_conversation(self, request: Request, gateway: Gateway,
                                  session: Session) -> Response:
        key = _conversation(request, gateway)
        if request.state.form.get("confirm") != key.conversation:
            raise ConsoleError(400, "Not deleted: type the conversation id to confirm.")
        await _erasure(gateway).delete_conversation(key)
        return _back_to_user(key.tenant, key.user)


def _when(seconds: float | None) -> str:
    """A unix time as UTC text (the page's script shows it in local time)."""
    if not isinstance(seconds, (int, float)):
        return ""
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _sessions(gateway: Gateway) -> SessionStore:
    return SessionStore(gateway.store.client, gateway.store.keys,
                        gateway.config.console.session_ttl_seconds)


def _control(gateway: Gateway) -> MemoryControl:
    return MemoryControl(gateway.store.client, gateway.store)


def _erasure(gateway: Gateway) -> MemoryErasure:
    settle = min(10.0, gateway.config.memory.worker.lock_seconds)
    return MemoryErasure(gateway.store.client, gateway.store, settle_seconds=settle,
                         disk=gateway.disk)


def _check_origin(request: Request) -> None:
    """Refuse a POST sent from another site (the browser says so in Sec-Fetch-Site and
    Origin); a client that sends neither (not a browser) still needs the CSRF token."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        raise ConsoleError(403, "Cross-site form posts are refused.")
    origin = request.headers.get("origin")
    if origin is not None and urlsplit(origin).netloc != request.headers.get("host"):
        raise ConsoleError(403, "Cross-origin form posts are refused.")


async def _form(request: Request) -> dict[str, str]:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise ConsoleError(413, "The form is too large.")
    try:
        return dict(parse_qsl(body.decode("utf-8"), max_num_fields=20))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConsoleError(400, "The form could not be read.") from exc


def _check_id(value: str, what: str) -> str:
    if not valid_id(value):
        raise ConsoleError(400, f"Not a valid {what}.")
    return value


def _tenant(request: Request, gateway: Gateway) -> str:
    tenant = request.path_params["tenant"]
    if tenant not in gateway.config.tenants:
        raise ConsoleError(404, "No such tenant is configured.")
    return tenant


def _user(request: Request) -> str:
    return _check_id(request.path_params["user"], "user id")


def _conversation(request: Request, gateway: Gateway) -> ConversationKey:
    return ConversationKey(_tenant(request, gateway), _user(request),
                           _check_id(request.path_params["conversation"], "conversation id"))


def _back_to_user(tenant: str, user: str) -> RedirectResponse:
    return RedirectResponse(f"/console/t/{quote(tenant)}/u/{quote(user)}", status_code=303)


def console_routes() -> list[Route | Mount]:
    console = Console()
    page, post = console.page, (lambda h: console.page(h, post=True))
    user = "/console/t/{tenant}/u/{user}"
    return [
        Route("/console/login", console.login_form, methods=["GET"]),
        Route("/console/login", console.login, methods=["POST"]),
        Route("/console/logout", post(console.logout), methods=["POST"]),
        Route("/console", page(console.tenants), methods=["GET"]),
        Route("/console/t/{tenant}", page(console.tenant), methods=["GET"]),
        Route("/console/t/{tenant}/requests", page(console.requests), methods=["GET"]),
        Route(user, page(console.user), methods=["GET"]),
        Route(user + "/export", page(console.export), methods=["GET"]),
        Route(user + "/facts/delete", post(console.delete_fact), methods=["POST"]),
        Route(user + "/facts/edit", post(console.edit_fact), methods=["POST"]),
        Route(user + "/erase", post(console.erase_user), methods=["POST"]),
        Route(user + "/c/{conversation}", page(console.conversation), methods=["GET"]),
        Route(user + "/c/{conversation}/delete", post(console.delete_conversation),
              methods=["POST"]),
        Mount("/console/static", StaticFiles(directory=HERE / "static"), name="console-static"),
    ]
