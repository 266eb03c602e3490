"""Pages out: the Jinja2 environment (autoescaped: every stored text is
shown as text), the security headers, and the visitor a page is shown to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape

from memstore.errors import StorageError
from memstore.inspector.session import COOKIE, CSRF_FIELD, Sessions
from memstore.store import Store

PREFIX = "/ui"
# No script runs on these pages at all: they work without JavaScript, and an
# escaping mistake could not run anything either.
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}


def url(path: str, **params: object) -> str:
    """An inspector URL; ids travel in the query string, so any id works."""
    query = urlencode({k: v for k, v in params.items() if v is not None and v != ""})
    return f"{PREFIX}{path}" + (f"?{query}" if query else "")


def _short(value: object, n: int = 12) -> str:
    s = str(value)
    return s if len(s) <= n else s[:n] + "…"


def _when(value: object) -> str:
    s = str(value or "")
    return s[:19].replace("T", " ")


ENV = Environment(
    loader=PackageLoader("memstore.inspector", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
ENV.globals["url"] = url
ENV.globals["CSRF_FIELD"] = CSRF_FIELD
ENV.filters["short"] = _short
ENV.filters["when"] = _when


class LoginNeeded(Exception):
    def __init__(self, next_path: str) -> None:
        super().__init__("login needed")
        self.next_path = next_path


@dataclass(frozen=True)
class Visitor:
    nonce: str | None  # the browser session; None for a Bearer-authenticated script
    csrf: str
    new_cookie: str | None = None  # to set on the response (loopback, no key)

    @property
    def bearer(self) -> bool:
        return self.nonce is None


@dataclass(frozen=True)
class Inspector:
    sessions: Sessions
    read_only: bool


def inspector_of(request: Request) -> Inspector:
    found: Inspector = request.app.state.inspector
    return found


class NotServing(StorageError):
    """The gateway's store is not open (starting or shutting down)."""


def current_store(request: Request) -> Store:
    store: Store | None = getattr(request.app.state, "store", None)
    if store is None:
        raise NotServing("the store is not open (the server is starting or shutting down)")
    return store


StoreDep = Annotated[Store, Depends(current_store)]


def visitor(request: Request) -> Visitor:
    """Who asks: a browser with a genuine session cookie, a script with the
    Bearer key, or (no key configured) anyone, who gets a session now."""
    sessions = inspector_of(request).sessions
    nonce = sessions.nonce_of(request.cookies.get(COOKIE))
    if nonce is not None:
        return Visitor(nonce, sessions.csrf_token(nonce))
    if sessions.bearer_ok(request.headers.get("authorization")):
        return Visitor(None, "")
    if not sessions.needs_login:
        cookie = sessions.new_cookie()
        nonce = sessions.nonce_of(cookie) or ""
        return Visitor(nonce, sessions.csrf_token(nonce), cookie)
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    raise LoginNeeded(target)


def set_session(request: Request, response: Response, cookie: str) -> None:
    response.set_cookie(
        COOKIE,
        cookie,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path=PREFIX,
    )


def page(
    request: Request, who: Visitor | None, template: str, code: int = 200, **ctx: Any
) -> HTMLResponse:
    ins = inspector_of(request)
    html = ENV.get_template(template).render(
        csrf=who.csrf if who else "",
        read_only=ins.read_only,
        logged_in=who is not None and ins.sessions.needs_login and not who.bearer,
        **ctx,
    )
    resp = HTMLResponse(html, status_code=code, headers=HEADERS)
    if who is not None and who.new_cookie:
        set_session(request, resp, who.new_cookie)
    return resp


def redirect(location: str) -> RedirectResponse:
    return RedirectResponse(location, status_code=303, headers=HEADERS)


__all__ = [
    "ENV", "HEADERS", "PREFIX", "Inspector", "LoginNeeded", "NotServing", "StoreDep", "Visitor",
    "inspector_of", "page", "redirect", "set_session", "url", "visitor",
]  # fmt: skip
