"""`ordo console`'s guard over real HTTP (uvicorn on 127.0.0.1, httpx as the browser): the
Host check, the login token becoming an HttpOnly SameSite=Strict cookie and leaving the URL,
401 without it, CSRF and Origin on POST, and the security headers on every answer, refusals
included. The API server is unreachable here: nothing below reaches it (what does is in
tests/cluster/test_console_browser.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import kopf
import pytest
import uvicorn
from tests.support.threaded_server import Cleanup, ServerThread, serve_uvicorn

from ordo.console.access import Access
from ordo.console.app import build
from ordo.console.main import bind, tracing_template
from ordo.console.pages import Console
from ordo.console.security import COOKIE, CSP, Guard
from ordo.operator.kube.client import KubeClient


@pytest.fixture(scope="module")
def console() -> Iterator[tuple[str, Guard]]:
    sock = bind(0)
    guard = Guard(port=sock.getsockname()[1])
    thread = ServerThread("console")

    async def setup() -> tuple[int, Cleanup]:
        kube = KubeClient(kopf.ConnectionInfo(server="https://kube.invalid"))
        app = build(Console(Access(kube, ["default"], "default"), guard))
        return await serve_uvicorn(uvicorn.Config(app, fd=sock.fileno(), log_level="warning"))

    thread.start(setup)
    try:
        yield f"http://127.0.0.1:{guard.port}", guard
    finally:
        thread.stop()
        sock.close()


def logged_in(base: str, guard: Guard) -> httpx.Client:
    client = httpx.Client(base_url=base)
    answer = client.get("/static/console.css", params={"token": guard.token})
    assert answer.status_code == 303
    return client


def assert_headers(answer: httpx.Response) -> None:
    assert answer.headers["content-security-policy"] == CSP
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["referrer-policy"] == "no-referrer"
    assert answer.headers["cache-control"] == "no-store"


def test_the_token_becomes_a_strict_httponly_cookie_and_leaves_the_url(
    console: tuple[str, Guard],
) -> None:
    base, guard = console
    assert guard.login_url() == f"{base}/?token={guard.token}"
    with httpx.Client(base_url=base) as client:
        answer = client.get("/agents", params={"token": guard.token, "x": "1"})
        assert answer.status_code == 303
        assert answer.headers["location"] == "/agents?x=1"
        assert_headers(answer)
        cookie = answer.headers["set-cookie"]
        assert cookie.startswith(f"{COOKIE}_{guard.port}=")
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
        assert guard.token not in cookie  # the session is not the token
        static = client.get("/static/console.js")
        assert static.status_code == 200 and "EventSource" in static.text
        assert_headers(static)


@pytest.mark.parametrize(
    "path", ["/", "/agents", "/approvals", "/tasks/default/x", "/live/tasks", "/static/console.js"]
)
def test_without_the_token_or_cookie_every_path_is_refused(
    console: tuple[str, Guard], path: str
) -> None:
    base, guard = console
    answer = httpx.get(base + path)
    assert answer.status_code == 401 and "ordo console" in answer.text
    assert_headers(answer)
    wrong = httpx.get(base + path, params={"token": "not-the-token"})
    assert wrong.status_code == 403 and "set-cookie" not in wrong.headers
    forged = httpx.get(base + path, cookies={f"{COOKIE}_{guard.port}": "forged"})
    assert forged.status_code == 401


def test_a_foreign_host_header_is_refused_even_with_the_token(console: tuple[str, Guard]) -> None:
    base, guard = console
    for host in (
        "evil.example",
        f"evil.example:{guard.port}",
        "127.0.0.1",
        f"0.0.0.0:{guard.port}",
    ):
        answer = httpx.get(base + "/", params={"token": guard.token}, headers={"Host": host})
        assert answer.status_code == 403 and "Host not allowed" in answer.text
        assert "set-cookie" not in answer.headers
        assert_headers(answer)
    local = httpx.get(
        base + "/static/console.css",
        params={"token": guard.token},
        headers={"Host": f"localhost:{guard.port}"},
    )
    assert local.status_code == 303


def test_a_post_needs_the_sessions_csrf_token_and_a_same_origin(
    console: tuple[str, Guard],
) -> None:
    base, guard = console
    client = logged_in(base, guard)
    try:
        session = client.cookies[guard.cookie]
        action = "/tasks/default/t/decide"
        form = {"call_id": "call_1", "decision": "Approve"}
        missing = client.post(action, data=form)
        assert missing.status_code == 403 and "CSRF" in missing.text
        other = client.post(action, data={**form, "csrf": guard.csrf_of("another-session")})
        assert other.status_code == 403
        right = {**form, "csrf": guard.csrf_of(session)}
        cross = client.post(action, data=right, headers={"Origin": "http://evil.example"})
        assert cross.status_code == 403 and "cross-origin" in cross.text
        site = client.post(action, data=right, headers={"Sec-Fetch-Site": "cross-site"})
        assert site.status_code == 403
        null = client.post(action, data=right, headers={"Origin": "null"})
        assert null.status_code == 403 and "cross-origin" in null.text
        null_same_site = {"Origin": "null", "Sec-Fetch-Site": "same-site"}
        assert client.post(action, data=right, headers=null_same_site).status_code == 403
        put = client.put(action, data=right)
        assert put.status_code == 405
        assert_headers(put)
    finally:
        client.close()
    # Without a session the token in a POST's query does not log in.
    anonymous = httpx.post(base + action, params={"token": guard.token}, data=right)
    assert anonymous.status_code == 401


def test_sessions_and_csrf_tokens_are_each_sessions_own() -> None:
    guard = Guard(port=1)
    a, b = guard.open_session(), guard.open_session()
    assert a != b and guard.session_ok(a) and guard.session_ok(b)
    assert guard.csrf_of(a) != guard.csrf_of(b)
    assert guard.csrf_ok(a, guard.csrf_of(a)) and not guard.csrf_ok(a, guard.csrf_of(b))
    assert not guard.session_ok("") and not guard.token_ok("")
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", guard.token)


def test_the_tracing_url_needs_http_and_the_trace_id() -> None:
    assert tracing_template("") == ""
    assert tracing_template("http://j/trace/{traceId}") == "http://j/trace/{traceId}"
    for bad in ("javascript:alert(1)//{traceId}", "http://j/trace/"):
        with pytest.raises(ValueError, match="--tracing-url"):
            tracing_template(bad)


def test_only_kubernetes_names_reach_an_api_path(console: tuple[str, Guard]) -> None:
    base, guard = console
    client = logged_in(base, guard)
    try:
        for path in (
            "/tasks/Default/t",
            "/tasks/default/x..",
            "/tasks/default/a%20b",
            "/live/tasks/default/-x",
            "/live/tasks?namespace=..",
        ):
            answer = client.get(path)
            assert answer.status_code == 404 and "Kubernetes names" in answer.text, path
            assert_headers(answer)
    finally:
        client.close()
