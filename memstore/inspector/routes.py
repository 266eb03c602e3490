"""The inspector's pages: users, a user, a memory, a conversation, recall
preview, generations; the forms that forget a memory and switch generations.

Every page reads through the Store's public methods with the user named in
the URL, so a page never shows another user's data: a memory or session id
of another user is simply not found. Ids travel in the query string.
"""

from __future__ import annotations

import logging
from collections import Counter
from importlib import resources
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Form, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from starlette.exceptions import HTTPException

from memstore.errors import InvalidInputError, MemstoreError, NotFoundError, PipelineError
from memstore.inspector.render import (
    PREFIX,
    Inspector,
    LoginNeeded,
    NotServing,
    StoreDep,
    Visitor,
    inspector_of,
    page,
    redirect,
    set_session,
    url,
    visitor,
)
from memstore.inspector.session import COOKIE, Sessions

log = logging.getLogger("memstore.inspector")
router = APIRouter(prefix=PREFIX, include_in_schema=False)
Who = Annotated[Visitor, Depends(visitor)]
MEMORY_TYPES = ("persona", "episodic", "instruction")


class Refused(Exception):
    """A state-changing request without a valid CSRF token, or in read-only mode."""


def _allowed_to_change(request: Request, who: Visitor, token: str | None) -> None:
    if inspector_of(request).read_only:
        raise Refused("the inspector is read-only: nothing can be changed here")
    if not who.bearer and not inspector_of(request).sessions.csrf_ok(who.nonce or "", token):
        raise Refused("this form expired or was not sent from the inspector (CSRF check failed)")


def _safe_next(target: str | None) -> str:
    # Only back into the inspector: never an open redirect to another site.
    if target and target.startswith(PREFIX + "/") and not target.startswith("//"):
        return target
    return PREFIX + "/"


@router.get("/static/style.css")
def style() -> Response:
    css = resources.files("memstore.inspector").joinpath("static/style.css").read_text("utf-8")
    return Response(css, media_type="text/css", headers={"cache-control": "max-age=300"})


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, next: str | None = None) -> HTMLResponse:
    return page(request, None, "login.html", next=_safe_next(next), error=None)


@router.post("/login", response_class=HTMLResponse)
def login(
    request: Request, key: Annotated[str, Form()] = "", next: Annotated[str, Form()] = ""
) -> Response:
    sessions = inspector_of(request).sessions
    if not sessions.needs_login:
        return redirect(_safe_next(next))
    if not sessions.key_matches(key):
        return page(request, None, "login.html", 401, next=_safe_next(next), error="Wrong key.")
    resp = redirect(_safe_next(next))
    set_session(request, resp, sessions.new_cookie())
    return resp


@router.post("/logout")
def logout(request: Request, who: Who, csrf_token: Annotated[str, Form()] = "") -> Response:
    if not who.bearer and not inspector_of(request).sessions.csrf_ok(who.nonce or "", csrf_token):
        raise Refused("this form expired or was not sent from the inspector (CSRF check failed)")
    resp = redirect(url("/login"))
    resp.delete_cookie(COOKIE, path=PREFIX)
    return resp


@router.get("/", response_class=HTMLResponse)
def users(request: Request, who: Who, store: StoreDep) -> HTMLResponse:
    return page(request, who, "users.html", users=store.list_users())


def _memories(
    store: Any, user: str, type_: str | None, generation: int | None, q: str, retired: bool
) -> list[dict[str, Any]]:
    if q.strip():
        hits = store.search_memories(user, q, type=type_, limit=20)
        return [
            {"memory_id": h.ref, "content": h.text, "type": h.type, "scene_name": h.scene,
             "priority": h.priority, "status": "active", "score": round(h.score, 3)}
            for h in hits
        ]  # fmt: skip
    mems = store.list_memories(user, type=type_, generation=generation, include_retired=retired)
    return sorted((dict(m) for m in mems), key=lambda m: (m["status"] != "active", -m["priority"]))


@router.get("/user", response_class=HTMLResponse)
def user(
    request: Request,
    who: Who,
    store: StoreDep,
    u: str,
    type: str = "",
    generation: str = "",
    q: str = "",
    retired: bool = False,
    forgotten: str = "",
) -> HTMLResponse:
    type_ = type or None
    gen = _int_or_none("generation", generation)
    try:
        status = store.pipeline_status(u)
    except MemstoreError as exc:  # opened without the pipeline
        log.info("no pipeline status for %r: %s", u, exc)
        status = []
    return page(
        request, who, "user.html",
        u=u, persona=store.get_persona(u), scenes=store.list_scenes(u),
        memories=_memories(store, u, type_, gen, q, retired),
        generations=store.list_generations(u), sessions=store.list_sessions(u),
        status=status[0] if status else None, types=MEMORY_TYPES,
        f={"type": type, "generation": generation, "q": q, "retired": retired},
        forgotten=forgotten,
    )  # fmt: skip


def _int_or_none(name: str, raw: str) -> int | None:
    if not raw.strip():
        return None
    try:
        return int(raw)
    except ValueError:
        raise InvalidInputError(f"{name} must be a whole number, got {raw!r}") from None


@router.get("/memory", response_class=HTMLResponse)
def memory(request: Request, who: Who, store: StoreDep, u: str, m: str) -> HTMLResponse:
    mem = store.get_memory(u, m)  # NotFoundError: the 404 page
    return page(
        request, who, "memory.html",
        u=u, m=mem, sources=store.memory_sources(u, m), history=store.memory_history(u, m),
    )  # fmt: skip


@router.post("/forget")
def forget(
    request: Request,
    who: Who,
    store: StoreDep,
    u: Annotated[str, Form()],
    m: Annotated[str, Form()],
    csrf_token: Annotated[str, Form()] = "",
) -> Response:
    _allowed_to_change(request, who, csrf_token)
    store.forget_memory(u, m, reason="inspector")
    return redirect(url("/user", u=u, forgotten=m))


@router.get("/session", response_class=HTMLResponse)
def session(request: Request, who: Who, store: StoreDep, u: str, s: str) -> HTMLResponse:
    msgs = store.session_messages(u, s)
    known = {x.memory_id: x for x in store.list_memories(u, include_retired=True)}
    return page(request, who, "session.html", u=u, s=s, messages=msgs, known=known)


@router.get("/recall", response_class=HTMLResponse)
def recall(
    request: Request,
    who: Who,
    store: StoreDep,
    u: str,
    q: str = "",
    threshold: str = "",
    budget: str = "",
) -> HTMLResponse:
    gate = None
    if threshold.strip():
        try:
            gate = float(threshold)
        except ValueError:
            raise InvalidInputError(f"threshold must be a number, got {threshold!r}") from None
    preview = (
        store.recall_preview(u, q, threshold=gate, budget_chars=_int_or_none("budget", budget))
        if q.strip()
        else None
    )
    default = store.settings.recall.threshold
    return page(
        request, who, "recall.html",
        u=u, q=q, threshold=threshold, budget=budget, preview=preview, default=default,
    )  # fmt: skip


@router.get("/generations", response_class=HTMLResponse)
def generations(
    request: Request, who: Who, store: StoreDep, u: str, confirm: str = ""
) -> HTMLResponse:
    gens = store.list_generations(u)
    # What switching changes: each generation's live memories by type.
    by_type = {
        g["generation"]: Counter(
            m["type"] for m in store.list_memories(u, generation=g["generation"])
        )
        for g in gens
    }
    want = _int_or_none("confirm", confirm)
    if want is not None and not any(g["generation"] == want for g in gens):
        raise NotFoundError(f"user {u!r} has no generation {want}")
    return page(
        request, who, "generations.html",
        u=u, generations=gens, confirm=want, by_type=by_type, types=MEMORY_TYPES,
    )  # fmt: skip


@router.post("/activate")
def activate(
    request: Request,
    who: Who,
    store: StoreDep,
    u: Annotated[str, Form()],
    generation: Annotated[int, Form()],
    csrf_token: Annotated[str, Form()] = "",
) -> Response:
    _allowed_to_change(request, who, csrf_token)
    store.activate_generation(u, generation)
    return redirect(url("/generations", u=u))


def _error_page(request: Request, status: int, message: str) -> Response:
    try:
        who: Visitor | None = visitor(request)
    except LoginNeeded:
        who = None
    return page(request, who, "error.html", status, status=status, message=message)


def mount(api: FastAPI, api_key: str | None, *, read_only: bool = False) -> None:
    """Serve the inspector under /ui of ``api``: its routes, and HTML error
    pages for them (the API's own routes keep their JSON errors)."""
    api.state.inspector = Inspector(Sessions(api_key), read_only)
    api.include_router(router)
    previous = dict(api.exception_handlers)

    async def on_error(request: Request, exc: Exception) -> Response:
        if not request.url.path.startswith(PREFIX + "/") and request.url.path != PREFIX:
            handler = previous.get(type(exc)) or next(
                (h for t, h in previous.items() if isinstance(t, type) and isinstance(exc, t)),
                None,
            )
            if handler is None:
                raise exc
            result: Response = await handler(request, exc)
            return result
        if isinstance(exc, LoginNeeded):
            return redirect(url("/login", next=exc.next_path))
        if isinstance(exc, Refused):
            return _error_page(request, 403, str(exc))
        if isinstance(exc, RequestValidationError):
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}"
                for e in exc.errors()
            )
            return _error_page(request, 400, f"invalid request: {problems}")
        if isinstance(exc, HTTPException):
            return _error_page(request, exc.status_code, str(exc.detail))
        if isinstance(exc, InvalidInputError):
            return _error_page(request, 400, str(exc))
        if isinstance(exc, NotFoundError):
            return _error_page(request, 404, str(exc))
        if isinstance(exc, NotServing):
            return _error_page(request, 503, str(exc))
        if isinstance(exc, PipelineError):
            return _error_page(request, 409, str(exc))
        log.warning("%s %s failed: %s", request.method, request.url.path, exc)
        return _error_page(request, 500, str(exc))

    for exc_type in (LoginNeeded, Refused, HTTPException, RequestValidationError, MemstoreError):
        api.add_exception_handler(exc_type, on_error)


__all__ = ["mount", "router"]
