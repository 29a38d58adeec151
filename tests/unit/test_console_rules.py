"""What the console learns the user may do (console/rules.py, console/access.py), over real
HTTP: the console (uvicorn) reads a small API server (aiohttp on 127.0.0.1) as the user. A
SelfSubjectRulesReview per shown namespace becomes the Tasks page's "what you may do" line
and decides whether approving is expected to work; an incomplete review falls back to
SelfSubjectAccessReviews; a namespace the user may not read is a note, not an error page; the
answers are reused for the TTL; the namespaces are chosen again after it, so one the user
gains access to appears without a restart."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import kopf
import uvicorn
from aiohttp import web
from tests.support.threaded_server import ServerThread, serve_aiohttp, serve_uvicorn

from ordo.console.access import SSAR_PATH, Access
from ordo.console.app import build
from ordo.console.main import bind
from ordo.console.pages import Console
from ordo.console.rules import SSRR_PATH
from ordo.console.security import Guard
from ordo.operator.kube.client import KubeClient
from ordo.operator.kube.paths import collection_path

READ_TASKS = {"verbs": ["get", "list", "watch"], "apiGroups": ["ordo.dev"], "resources": ["tasks"]}
APPROVE = {"verbs": ["create"], "apiGroups": ["ordo.dev"], "resources": ["toolapprovals"]}


@dataclass
class FakeApi:
    """Namespaces, Tasks, and the user's rights: `rules` (a namespace's SelfSubjectRulesReview
    status) and `allowed` ((verb, resource, namespace) a SelfSubjectAccessReview allows)."""

    namespaces: list[str]
    allowed: set[tuple[str, str, str]]
    rules: dict[str, dict[str, Any]] = field(default_factory=dict)
    rules_asked: list[str] = field(default_factory=list)

    async def rules_review(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        namespace = body["spec"]["namespace"]
        self.rules_asked.append(namespace)
        status = self.rules.get(namespace, {"resourceRules": [], "incomplete": False})
        return web.json_response({**body, "status": status}, status=201)

    async def access_review(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        attributes = body["spec"]["resourceAttributes"]
        key = (attributes["verb"], attributes["resource"], attributes.get("namespace", ""))
        return web.json_response({**body, "status": {"allowed": key in self.allowed}}, status=201)

    async def user(self, request: web.Request) -> web.Response:
        return web.json_response({"status": {"userInfo": {"username": "alice"}}}, status=201)

    async def namespace_list(self, request: web.Request) -> web.Response:
        items = [{"metadata": {"name": ns}} for ns in self.namespaces]
        return web.json_response({"items": items, "metadata": {"resourceVersion": "1"}})

    async def tasks(self, request: web.Request) -> web.Response:
        namespace = request.match_info["namespace"]
        if ("list", "tasks", namespace) not in self.allowed:
            message = f'tasks.ordo.dev is forbidden: User "alice" cannot list tasks in {namespace}'
            status = {"kind": "Status", "reason": "Forbidden", "message": message, "code": 403}
            return web.json_response(status, status=403)
        meta = {"name": f"task-in-{namespace}", "namespace": namespace}
        task = {"metadata": meta, "spec": {"agentRef": "bot"}, "status": {"phase": "Running"}}
        return web.json_response({"items": [task], "metadata": {"resourceVersion": "7"}})

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post(SSRR_PATH, self.rules_review)
        app.router.add_post(SSAR_PATH, self.access_review)
        app.router.add_post("/apis/authentication.k8s.io/v1/selfsubjectreviews", self.user)
        app.router.add_get("/api/v1/namespaces", self.namespace_list)
        app.router.add_get(collection_path("Task", "{namespace}"), self.tasks)
        return app


@contextmanager
def console(fake: FakeApi, ttl: float) -> Iterator[tuple[httpx.Client, Access, ServerThread]]:
    """The console as user alice (no --namespace, context namespace "home"), logged in."""
    sock = bind(0)
    guard = Guard(port=sock.getsockname()[1])
    thread = ServerThread("console-rules")
    holder: list[Access] = []

    async def setup() -> tuple[int, Any]:
        api_port, api_cleanup = await serve_aiohttp(fake.app())
        kube = KubeClient(kopf.ConnectionInfo(server=f"http://127.0.0.1:{api_port}"))
        holder.append(Access(kube, [], "home", ttl=ttl))
        app = build(Console(holder[0], guard))
        port, cleanup = await serve_uvicorn(
            uvicorn.Config(app, fd=sock.fileno(), log_level="warning")
        )

        async def stop() -> None:
            await cleanup()
            await kube.close()
            await api_cleanup()

        return port, stop

    thread.start(setup)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{guard.port}", timeout=10) as client:
            assert client.get("/", params={"token": guard.token}).status_code == 303
            yield client, holder[0], thread
    finally:
        thread.stop()
        sock.close()


def line(page: str, namespace: str) -> str:
    start = page.index(f'<li data-namespace="{namespace}">')
    return page[start : page.index("</li>", start)]


def test_the_rules_review_says_what_the_user_may_do_per_namespace() -> None:
    fake = FakeApi(
        ["a", "b", "c"],
        allowed={
            ("list", "namespaces", ""),
            ("list", "tasks", "a"),
            ("list", "tasks", "b"),
            ("list", "events", "b"),
        },
        rules={
            "a": {"resourceRules": [READ_TASKS, APPROVE], "incomplete": False},
            # A webhook authorizer could not list its rules: what they lack is asked again.
            "b": {"resourceRules": [READ_TASKS], "incomplete": True},
        },
    )
    with console(fake, ttl=60) as (client, access, thread):
        page = client.get("/").text
        a, b = line(page, "a"), line(page, "b")
        assert "approve and reject (create ToolApprovals)" in a.split("you may not")[0]
        assert "list Events" in a.split("you may not")[1] and "the rules review" in a
        assert "list Events" in b.split("you may not")[0]  # from the access review
        assert "approve and reject" in b.split("you may not")[1]
        assert "the rules review (incomplete) and access reviews" in b
        assert "task-in-a" in page and "task-in-b" in page and "task-in-c" not in page
        assert 'data-namespace="c"' not in page  # c is not read: SSAR says no Tasks there
        assert thread.call(access.may_decide("a")) and not thread.call(access.may_decide("b"))
        client.get("/")
        assert sorted(fake.rules_asked) == ["a", "b"]  # each answer reused within the TTL


def test_an_unreadable_namespace_is_a_note_and_one_gained_appears_without_a_restart() -> None:
    # alice may not list namespaces: the console shows her context's namespace, unreadable.
    fake = FakeApi(["home", "team"], allowed=set())
    with console(fake, ttl=0) as (client, _access, _thread):
        answer = client.get("/")
        assert answer.status_code == 200
        home = line(answer.text, "home")
        assert "you may none of what the console does" in home
        assert "No Tasks are shown from home" in home and "list Tasks" in home
        assert "cannot list tasks in home" in answer.text  # the API server's answer, as a note
        # She is given list namespaces and Tasks in team: the next page shows team instead.
        fake.allowed |= {("list", "namespaces", ""), ("list", "tasks", "team")}
        fake.rules["team"] = {"resourceRules": [READ_TASKS], "incomplete": False}
        page = client.get("/").text
        assert "task-in-team" in page and 'data-namespace="home"' not in page
        assert "No Tasks are shown" not in line(page, "team")


def test_the_namespaces_probed_reach_past_the_first_hundred_and_start_with_the_context() -> None:
    # A cluster of 300 namespaces, sorted as the API lists them: alice may list Tasks in the
    # 250th only, and in her context's namespace "zz-home" (listed last). Both are found.
    names = [f"ns-{i:03d}" for i in range(300)] + ["zz-home"]
    allowed = {
        ("list", "namespaces", ""),
        ("list", "tasks", "ns-249"),
        ("list", "tasks", "zz-home"),
    }
    fake = FakeApi(names, allowed=allowed)
    with console(fake, ttl=60) as (client, access, thread):
        access.default_namespace = "zz-home"
        scope = thread.call(access.scope())
        assert scope.names == ["ns-249", "zz-home"]
        assert scope.how == "the namespaces where you may list Tasks"
        assert "task-in-ns-249" in client.get("/").text
