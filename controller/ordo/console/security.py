"""What guards every request of the console (docs/console.md#security): the Host header (DNS
rebinding), the login token and the session cookie it becomes, CSRF on every POST (a
per-session token in a hidden field, and the Origin), and the response headers (a strict CSP,
no sniffing, no referrer, no caching).

The login token is in the URL `ordo console` prints once; the first request with it gets a
session cookie (HttpOnly, SameSite=Strict) and a redirect that drops the token from the URL.
Every later request must carry that cookie. Comparisons are constant-time."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from urllib.parse import urlencode

from starlette.datastructures import URL
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

COOKIE = "ordo_console"
CSRF_FIELD = "csrf"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; object-src 'none'; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'self'"
)
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}
MAX_SESSIONS = 64
"""Sessions kept (each a browser that opened the login URL); the oldest is dropped beyond."""


@dataclass
class Guard:
    """The console's secrets: the login token and the sessions it opened."""

    port: int
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    _key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    _sessions: list[str] = field(default_factory=list, repr=False)

    @property
    def cookie(self) -> str:
        """The session cookie's name, the port's own: cookies are shared by every port of a
        host, so two consoles (two users) in one browser keep their sessions apart."""
        return f"{COOKIE}_{self.port}"

    @property
    def hosts(self) -> frozenset[str]:
        return frozenset({f"127.0.0.1:{self.port}", f"localhost:{self.port}"})

    @property
    def origins(self) -> frozenset[str]:
        return frozenset(f"http://{host}" for host in self.hosts)

    def login_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/?{urlencode({'token': self.token})}"

    def token_ok(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.token.encode())

    def open_session(self) -> str:
        session = secrets.token_urlsafe(32)
        self._sessions.append(session)
        del self._sessions[:-MAX_SESSIONS]
        return session

    def session_ok(self, given: str) -> bool:
        # Every session compared (no early exit): the time says nothing of which matched.
        found = False
        for session in self._sessions:
            found |= hmac.compare_digest(given.encode(), session.encode())
        return found

    def csrf_of(self, session: str) -> str:
        """The session's CSRF token: an HMAC of the session under a key only the process has."""
        return hmac.new(self._key, session.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, session: str, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.csrf_of(session).encode())


def _refused(status: int, text: str) -> Response:
    return PlainTextResponse(text, status_code=status)


class GuardMiddleware:
    """ASGI middleware: checks Host, session (or the login token) and, on POST, Origin (the
    CSRF field is checked by the handler, which reads the form: `check_csrf`); adds `HEADERS`
    to every response, refusals included."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v) for k, v in message.get("headers", []) if k.decode() not in HEADERS
                ]
                headers += [(k.encode(), v.encode()) for k, v in HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        request = Request(scope)
        refusal = self._refusal(request)
        if refusal is not None:
            await refusal(scope, receive, send_with_headers)
            return
        token = request.query_params.get("token")
        if token is not None and request.method == "GET":
            if not self.guard.token_ok(token):
                await _refused(403, "wrong login token")(scope, receive, send_with_headers)
                return
            # Log in: a session cookie, and the same URL without the token.
            query = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            target = URL(path=request.url.path, query=urlencode(query))
            response = RedirectResponse(str(target), status_code=303)
            response.set_cookie(
                self.guard.cookie,
                self.guard.open_session(),
                httponly=True,
                samesite="strict",
                path="/",
            )
            await response(scope, receive, send_with_headers)
            return
        session = request.cookies.get(self.guard.cookie, "")
        if not session or not self.guard.session_ok(session):
            text = "not logged in: open the URL `ordo console` printed (it has the login token)"
            await _refused(401, text)(scope, receive, send_with_headers)
            return
        scope.setdefault("state", {})["session"] = session
        await self.app(scope, receive, send_with_headers)

    def _refusal(self, request: Request) -> Response | None:
        host = request.headers.get("host", "")
        if host not in self.guard.hosts:
            return _refused(
                403, "Host not allowed: the console answers 127.0.0.1 or localhost only"
            )
        if request.method not in ("GET", "HEAD", "POST"):
            return _refused(405, "method not allowed")
        if request.method == "POST":
            # Under `Referrer-Policy: no-referrer` Chromium sends `Origin: null` with a
            # same-origin form: then the browser's own Sec-Fetch-Site must say same-origin.
            origin = request.headers.get("origin")
            fetch_site = request.headers.get("sec-fetch-site")
            if fetch_site is not None and fetch_site != "same-origin":
                return _refused(403, "cross-site request refused")
            if origin == "null" and fetch_site != "same-origin":
                return _refused(403, "cross-origin request refused")
            if origin not in (None, "null") and origin not in self.guard.origins:
                return _refused(403, "cross-origin request refused")
        return None


def check_csrf(guard: Guard, request: Request, given: object) -> bool:
    """Whether `given` (the form's CSRF field) is the CSRF token of the request's session."""
    session = request.state.session if hasattr(request.state, "session") else ""
    return isinstance(given, str) and bool(session) and guard.csrf_ok(session, given)
