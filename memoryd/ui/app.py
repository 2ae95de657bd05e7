"""The viewer as a small Starlette application: server-rendered pages, a little CSS.

Security, for a page that can forget memories:
- It listens on 127.0.0.1 only, and answers only requests whose Host is
  127.0.0.1 or localhost on its own port (no DNS rebinding).
- Every request needs a session: `memoryd ui` opens `/login?token=...` with
  the secret token, which starts a session of a random id (never the token: a
  browser sends a 127.0.0.1 cookie to every local port, other servers'
  included) in an HttpOnly, SameSite=Strict cookie named for the port, and
  redirects to a clean URL. Without one, 403.
- Every state-changing request is a POST carrying the session's CSRF token
  (an HMAC of the session id with a key of its own, never derived from the
  token) from a same-origin page; anything else is refused. The
  SameSite=Strict cookie is not even sent from another site.
- A Content-Security-Policy allows only this server's own styles, script and
  images; nothing is fetched from the internet (everything ships in the package).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import structlog
from jinja2 import TemplateNotFound
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from memoryd.errors import FILES_REPLACED, ApiError, MemorydError
from memoryd.memory.models import MemoryType
from memoryd.ui.data import CHART_DAYS, Chart, ViewerData

log = structlog.get_logger("memoryd.ui")

HERE = Path(__file__).parent
#: The session cookie's name: one per viewer port, so two viewers never overwrite each
#: other's, and what another local server is sent is only a session id of this run.
COOKIE_PREFIX = "memoryd_ui_"
CSP = ("default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self';"
       " form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
LOCAL_HOSTS = ("127.0.0.1", "localhost")
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
           "#9c755f")
#: How long a viewer session lasts without a new `memoryd ui`.
SESSION_SECONDS = 12 * 3600


def cookie_name(port: int | None) -> str:
    return f"{COOKIE_PREFIX}{port}"


class Sessions:
    """The viewer's sessions: a random id per login, never the secret token (a browser
    sends a 127.0.0.1 cookie to every local port), each with a CSRF token from a secret
    of its own. They live as long as the viewer, at most SESSION_SECONDS each."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._started: dict[str, float] = {}
        self._csrf_key = secrets.token_bytes(32)

    def open(self) -> str:
        session = secrets.token_urlsafe(32)
        self._started[session] = self._clock()
        return session

    def valid(self, session: str) -> bool:
        started = self._started.get(session)
        if started is None:
            return False
        if self._clock() - started > SESSION_SECONDS:
            del self._started[session]
            return False
        return True

    def csrf(self, session: str) -> str:
        return hmac.new(self._csrf_key, session.encode(), hashlib.sha256).hexdigest()


def _session_of(request: Request) -> str:
    port = request.scope.get("server", (None, None))[1]
    return request.cookies.get(cookie_name(port), "")


class Guard(BaseHTTPMiddleware):
    """Host, session and CSRF checks on every request; security headers on every answer."""

    def __init__(self, app: Any, sessions: Sessions) -> None:
        super().__init__(app)
        self._sessions = sessions

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        refusal = await self._refusal(request)
        response = refusal or await call_next(request)
        headers = response.headers
        headers["Content-Security-Policy"] = CSP
        headers["X-Content-Type-Options"] = "nosniff"
        # same-origin, not no-referrer: under no-referrer a form POST says `Origin: null`.
        headers["Referrer-Policy"] = "same-origin"
        headers["X-Frame-Options"] = "DENY"
        headers.setdefault("Cache-Control", "no-store")
        return response

    async def _refusal(self, request: Request) -> Response | None:
        port = request.scope.get("server", (None, None))[1]
        host = request.headers.get("host", "")
        if host not in {f"{h}:{port}" for h in LOCAL_HOSTS}:
            return PlainTextResponse("memoryd viewer: unknown host", status_code=400)
        if request.url.path == "/login":
            return None
        session = _session_of(request)
        if not self._sessions.valid(session):
            return PlainTextResponse("memoryd viewer: open it with `memoryd ui`",
                                     status_code=403)
        if request.method not in ("GET", "HEAD"):
            origin = request.headers.get("origin")
            if origin is not None and origin != f"http://{host}":
                return PlainTextResponse("memoryd viewer: cross-site request refused",
                                         status_code=403)
            await request.body()  # read once here: the handler gets it replayed
            form = await request.form()
            sent = str(form.get("csrf") or "")
            if not hmac.compare_digest(sent.encode(), self._sessions.csrf(session).encode()):
                return PlainTextResponse("memoryd viewer: missing or wrong form token",
                                         status_code=403)
        return None


class _Static(StaticFiles):
    """The viewer's assets; a page that says to restart when they were replaced."""

    def __init__(self, replaced: Callable[[], Response], **options: Any) -> None:
        super().__init__(**options)
        self._replaced = replaced

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if not (HERE / "static").is_dir():
            await self._replaced()(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


class _Viewer:
    """The viewer's pages over `data`, guarded by `secret`."""

    def __init__(self, data: ViewerData, secret: str) -> None:
        self.data, self.secret = data, secret
        self.logins = Sessions()
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.globals.update(memory_types=[t.value for t in MemoryType],
                                          about=about_date, stored_apart=stored_apart)
        self._told = False

    def replaced(self) -> Response:
        # Said once in the log; every page says it until the daemon is restarted.
        if not self._told:
            self._told = True
            log.warning("ui_files_replaced", directory=str(HERE))
        return PlainTextResponse(f"memoryd viewer: {FILES_REPLACED}", status_code=503)

    def page(self, request: Request, name: str, status: int = 200,
             **context: Any) -> Response:
        try:
            context = {"csrf": self.logins.csrf(_session_of(request)), **context}
            return self.templates.TemplateResponse(request, name, context, status_code=status)
        except TemplateNotFound:
            return self.replaced()

    def guarded(self, handler: Callable[[Request], Awaitable[Response]]
                ) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            try:
                return await handler(request)
            except ApiError as exc:
                return self.page(request, "error.html", status=exc.status, message=str(exc))
            except MemorydError as exc:
                log.warning("ui_request_failed", path=request.url.path, error=str(exc))
                return self.page(request, "error.html", status=503, message=str(exc))
        return run

    async def login(self, request: Request) -> Response:
        token = request.query_params.get("token", "")
        if not hmac.compare_digest(token.encode(), self.secret.encode()):
            return PlainTextResponse("memoryd viewer: open it with `memoryd ui`",
                                     status_code=403)
        response = RedirectResponse("/", status_code=303)
        port = request.scope.get("server", (None, None))[1]
        response.set_cookie(cookie_name(port), self.logins.open(), httponly=True,
                            samesite="strict", path="/")
        return response

    async def overview(self, request: Request) -> Response:
        return self.page(request, "overview.html", status_report=await self.data.overview(),
                    nav="overview", chart_days=CHART_DAYS)

    async def sessions(self, request: Request) -> Response:
        return self.page(request, "sessions.html", projects=await self.data.sessions(),
                         nav="sessions")

    async def session(self, request: Request) -> Response:
        offset = _int(request.query_params.get("offset"), 0)
        found = await self.data.session(request.path_params["ref"], offset)
        if found is None:
            raise ApiError(404, f"no session {request.path_params['ref'][:80]!r}")
        return self.page(request, "session.html", s=found, nav="sessions")

    async def memories(self, request: Request) -> Response:
        params = request.query_params
        query = params.get("q", "")
        args: dict[str, Any] = {"query": query, "limit": _int(params.get("limit"), 20, 1, 200)}
        for key in ("project", "since", "until"):
            if params.get(key):
                args[key] = params[key]
        if params.get("type"):
            args["types"] = [params["type"]]
        if params.get("all"):
            args["all_projects"] = True
        searched = bool(query or params.get("project") or params.get("type")
                        or params.get("since"))
        results = await self.data.search(args) if searched else []
        return self.page(request, "memories.html", results=results, searched=searched,
                    params=params, nav="memories", notice=params.get("notice"))

    async def memory(self, request: Request) -> Response:
        found = await self.data.memory(request.path_params["memory_id"])
        return self.page(request, "memory.html", m=found["memory"], history=found["history"],
                    events=await self.data.memory_events(found["memory"]["id"]), nav="memories",
                    notice=request.query_params.get("notice"))

    async def remember(self, request: Request) -> Response:
        form = await request.form()
        args = {"content": _field(form, "content"), "type": _field(form, "type") or "fact"}
        if _field(form, "project"):
            args["project"] = _field(form, "project")
        made = (await self.data.call("remember", args))["memory"]
        return _see(f"/memories/{made['id']}", notice="remembered")

    async def correct(self, request: Request) -> Response:
        form = await request.form()
        done = await self.data.call("correct", {"memory_id": request.path_params["memory_id"],
                                           "content": _field(form, "content"),
                                           "reason": _field(form, "reason") or None})
        return _see(f"/memories/{done['memory']['id']}", notice="corrected")

    async def confirm_forget(self, request: Request) -> Response:
        found = await self.data.memory(request.path_params["memory_id"])
        hard = request.query_params.get("hard") == "1"
        return self.page(request, "forget.html", m=found["memory"], history=found["history"],
                    hard=hard, nav="memories")

    async def forget(self, request: Request) -> Response:
        form = await request.form()
        hard = _field(form, "hard") == "1"
        memory_id = request.path_params["memory_id"]
        done = await self.data.call("forget", {"memory_id": memory_id, "hard": hard})
        notice = (f"forgot {memory_id}" + (" for good" if hard else "")
                  if done["forgotten"] else f"{memory_id} was not live")
        return _see("/memories", notice=notice)

    async def activity(self, request: Request) -> Response:
        return self.page(request, "activity.html", activity=await self.data.activity(),
                         nav="activity")

    async def chart(self, request: Request) -> Response:
        what = request.query_params.get("what", "messages")
        drawn = await self.data.chart()
        svg = chart_svg(drawn, drawn.memories if what == "memories" else drawn.messages,
                        what)
        return Response(svg, media_type="image/svg+xml",
                        headers={"Cache-Control": "private, max-age=60"})


def make_app(data: ViewerData, secret: str) -> Starlette:
    """The viewer over `data`, guarded by `secret` (the token `memoryd ui` hands out)."""
    v = _Viewer(data, secret)
    routes = [
        Route("/login", v.login),
        Route("/", v.guarded(v.overview)),
        Route("/sessions", v.guarded(v.sessions)),
        Route("/sessions/{ref}", v.guarded(v.session)),
        Route("/memories", v.guarded(v.memories)),
        Route("/memories", v.guarded(v.remember), methods=["POST"]),
        Route("/memories/{memory_id}", v.guarded(v.memory)),
        Route("/memories/{memory_id}/correct", v.guarded(v.correct), methods=["POST"]),
        Route("/memories/{memory_id}/forget", v.guarded(v.confirm_forget)),
        Route("/memories/{memory_id}/forget", v.guarded(v.forget), methods=["POST"]),
        Route("/activity", v.guarded(v.activity)),
        Route("/chart.svg", v.guarded(v.chart)),
        Mount("/static", _Static(v.replaced, directory=str(HERE / "static"), check_dir=False),
              name="static"),
    ]
    return Starlette(routes=routes, middleware=[Middleware(Guard, sessions=v.logins)])


def _see(path: str, **query: str) -> RedirectResponse:
    return RedirectResponse(f"{path}?{urlencode(query)}" if query else path, status_code=303)


def _field(form: FormData, name: str) -> str:
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""


def _int(value: str | None, default: int, low: int = 0, high: int = 10**9) -> int:
    try:
        return max(low, min(high, int(value))) if value is not None else default
    except ValueError:
        return default


def about_date(memory: dict[str, Any]) -> str:
    """The day a memory is about: when its conversation happened (its provenance), else
    when it was stored (a fact told directly)."""
    provenance = memory.get("provenance") or {}
    when = provenance.get("ended_at") or provenance.get("started_at") or memory.get(
        "created_at") or ""
    return str(when)[:10]


def stored_apart(memory: dict[str, Any]) -> bool:
    """Whether the day it was stored differs from the day it is about (backfilled)."""
    return str(memory.get("created_at") or "")[:10] != about_date(memory)


def chart_svg(chart: Chart, series: dict[str, list[int]], what: str) -> str:
    """Stacked bars per day, one colour per project (the busiest eight; the rest as one)."""
    from html import escape

    width, height, left, bottom, top = 760, 220, 40, 40, 10
    ranked = sorted(series, key=lambda p: -sum(series[p]))
    shown, rest = ranked[:len(PALETTE) - 1], ranked[len(PALETTE) - 1:]
    stacks = {p: series[p] for p in shown}
    if rest:
        stacks["other projects"] = [sum(series[p][i] for p in rest)
                                    for i in range(len(chart.days))]
    totals = [sum(v[i] for v in stacks.values()) for i in range(len(chart.days))]
    peak = max(totals, default=0) or 1
    step = (width - left) / max(1, len(chart.days))
    scale = (height - bottom - top) / peak
    full = height + 20 * (1 + len(stacks) // 3)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{full}"'
             f' role="img" aria-label="{escape(what)} per day">']
    if not stacks:  # no axes over nothing: one sentence
        parts.append(f'<text x="{left}" y="{height / 2:.0f}" font-size="12"'
                     f' font-family="sans-serif" fill="#777">no {escape(what)} in the last'
                     f' {len(chart.days)} days</text></svg>')
        return "".join(parts)
    unit = what[:-1] if peak == 1 and what.endswith("s") else what
    parts.append(f'<text x="{left}" y="{top + 2}" font-size="11" font-family="sans-serif"'
                 f' fill="#555">{peak:,} {escape(unit)}</text>')
    for i, day in enumerate(chart.days):
        y = float(height - bottom)
        for colour, (project, values) in zip(PALETTE, stacks.items(), strict=False):
            h = values[i] * scale
            if h > 0:
                y -= h
                parts.append(
                    f'<rect x="{left + i * step + 1:.1f}" y="{y:.1f}" width="{step - 2:.1f}"'
                    f' height="{h:.1f}" fill="{colour}"><title>{escape(day)}'
                    f' {escape(project)}: {values[i]:,}</title></rect>')
        last = i == len(chart.days) - 1
        if i % 5 == 0 or last:
            x = left + (i + 1) * step if last else left + i * step
            parts.append(f'<text x="{x:.1f}" y="{height - bottom + 14}"'
                         f' text-anchor="{"end" if last else "start"}" font-size="10"'
                         f' font-family="sans-serif" fill="#555">{escape(day[5:])}</text>')
    for n, (colour, project) in enumerate(zip(PALETTE, stacks, strict=False)):
        x, y = left + (n % 3) * 240, height + 20 * (n // 3)
        parts.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{colour}"/>'
                     f'<text x="{x + 14}" y="{y}" font-size="11" font-family="sans-serif">'
                     f'{escape(_short(project))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _short(project: str, keep: int = 34) -> str:
    return project if len(project) <= keep else "…" + project[-(keep - 1):]

