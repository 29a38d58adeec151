"""The console's pages: Tasks (with filters and counts), a Task (budget, step
timeline, waiting calls with approve/reject, children, Events, trace), Agents, the approvals
inbox, and the approve/reject action. Every read and write is the user's (`access`); a refusal
of the API server is shown as it answered."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse

from ..cli import approvals as approvecli
from ..operator.kube.client import ApiError
from . import live, present
from .access import Access, refusal_text
from .security import CSRF_FIELD, Guard, check_csrf

MAX_REASON = 1024
MAX_FORM = 16384
NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
"""A Kubernetes object or namespace name (DNS-1123 subdomain): nothing else reaches an API
path."""
MAX_SHOWN = 20
"""Namespaces whose "what you may do" line the Tasks page shows (one rules review each)."""


def _named(request: Request) -> tuple[str, str] | None:
    """The Task's namespace and name from the path, or None if either is not a name."""
    namespace, name = request.path_params["namespace"], request.path_params["name"]
    if NAME.fullmatch(namespace) and NAME.fullmatch(name):
        return namespace, name
    return None


def _not_a_name() -> Response:
    return HTMLResponse("no such Task: the namespace and name must be Kubernetes names", 404)


async def _form(request: Request) -> dict[str, str] | None:
    """The POSTed form's fields (the first of each), or None if it is not a small urlencoded
    form (the console's forms are; no multipart parser needed)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip()
    if kind != "application/x-www-form-urlencoded":
        return None
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            return None
    return {key: values[0] for key, values in parse_qs(body.decode(errors="replace")).items()}


@dataclass
class Console:
    """What every page needs: the user's access, the guard, the templates, the tracing URL."""

    access: Access
    guard: Guard
    tracing_url: str = ""
    streams: live.Streams | None = None

    def __post_init__(self) -> None:
        self.env = Environment(
            loader=PackageLoader("ordo.console", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
        )
        self.streams = self.streams or live.Streams()

    async def render(
        self, request: Request, template: str, status_code: int = 200, **context: Any
    ) -> HTMLResponse:
        session = getattr(request.state, "session", "")
        scope = await self.access.scope()
        html = self.env.get_template(template).render(
            csrf_field=CSRF_FIELD,
            csrf=self.guard.csrf_of(session) if session else "",
            user=await self.access.user(),
            scope=scope,
            path=request.url.path,
            **context,
        )
        return HTMLResponse(html, status_code=status_code)

    # -- Tasks -------------------------------------------------------------------------------

    def _filters(self, request: Request) -> present.Filters:
        q = request.query_params
        return present.Filters(
            namespace=q.get("namespace", ""),
            agent=q.get("agent", ""),
            phase=q.get("phase", ""),
            reason=q.get("reason", ""),
        )

    async def _task_list(self, request: Request) -> dict[str, Any]:
        filters = self._filters(request)
        if filters.namespace and not NAME.fullmatch(filters.namespace):
            filters = present.Filters(
                agent=filters.agent, phase=filters.phase, reason=filters.reason
            )
        listing = await self.access.in_scope("Task", filters.namespace or None)
        scope = await self.access.scope()
        shown = (
            [filters.namespace] if filters.namespace else [] if scope.everywhere else scope.names
        )
        permissions = await asyncio.gather(
            *(self.access.permissions(ns) for ns in shown[:MAX_SHOWN])
        )
        query = request.url.query
        return {
            "filters": filters,
            "permissions": permissions,
            "listing": present.task_list(listing.items, filters),
            "problems": listing.problems,
            "live_source": f"/live/tasks?{query}&rv={listing.version}"
            if query
            else f"/live/tasks?rv={listing.version}",
            "live_page": f"/?{query}" if query else "/",
        }

    async def tasks(self, request: Request) -> Response:
        return await self.render(request, "tasks.html", **await self._task_list(request))

    async def tasks_live(self, request: Request) -> Response:
        namespace = request.query_params.get("namespace") or None
        if namespace is not None and not NAME.fullmatch(namespace):
            return _not_a_name()
        namespaces = await self.access.watched(namespace)
        return self._stream(namespaces, request.query_params.get("rv", ""))

    def _stream(
        self, namespaces: list[str | None], version: str, field_selector: str | None = None
    ) -> Response:
        assert self.streams is not None
        body = live.stream(
            self.access.kube, namespaces, version, self.streams, field_selector=field_selector
        )
        return StreamingResponse(body, media_type="text/event-stream")

    # -- A Task ------------------------------------------------------------------------------

    async def _task_context(self, namespace: str, name: str) -> tuple[dict[str, Any], int]:
        try:
            task = await self.access.kube.get("Task", namespace, name)
        except ApiError as exc:
            return {"refusal": refusal_text(exc), "namespace": namespace, "name": name}, exc.status
        if task is None:
            text = f"Task {name!r} not found in namespace {namespace!r}"
            return {"refusal": text, "namespace": namespace, "name": name}, 404
        siblings, calls, (events, events_problem), may_decide = await asyncio.gather(
            self._namespace_tasks(namespace),
            approvecli.calls_of(self.access.kube, task),
            self.access.events_of(namespace, name),
            self.access.may_decide(namespace),
        )
        trace_id = str(present.status(task).get("traceId") or "")
        version = str(present.meta(task).get("resourceVersion") or "")
        context = {
            "namespace": namespace,
            "name": name,
            "task": task,
            "row": present.task_row(task),
            "message": str(present.status(task).get("message") or ""),
            "budget": present.budget(task),
            "steps": present.timeline(task),
            "truncated": bool(present.status(task).get("toolCallsTruncated")),
            "conditions": present.conditions(task),
            "calls": calls,
            "children_waiting": approvecli.children_waiting(task),
            "may_decide": may_decide,
            "tree": present.children_tree(task, siblings),
            "events": events,
            "events_problem": events_problem,
            "trace_id": trace_id,
            "trace_url": self.tracing_url.replace("{traceId}", trace_id)
            if trace_id and self.tracing_url
            else "",
            "live_source": f"/live/tasks/{namespace}/{name}?rv={version}",
            "live_page": f"/tasks/{namespace}/{name}",
        }
        return context, 200

    async def _namespace_tasks(self, namespace: str) -> list[dict[str, Any]]:
        try:
            return (await self.access.kube.list_versioned("Task", namespace))[0]
        except ApiError:
            return []  # the tree then shows what the parent's status.children says

    async def task(self, request: Request) -> Response:
        named = _named(request)
        if named is None:
            return _not_a_name()
        namespace, name = named
        context, status_code = await self._task_context(namespace, name)
        return await self.render(request, "task.html", status_code, **context)

    async def task_live(self, request: Request) -> Response:
        named = _named(request)
        if named is None:
            return _not_a_name()
        namespace, name = named
        version = request.query_params.get("rv", "")
        return self._stream([namespace], version, field_selector=f"metadata.name={name}")

    async def decide(self, request: Request) -> Response:
        """Approve or reject a waiting call: the ToolApproval `ordo approve|reject` creates,
        created as the user (the API server and its admission decide)."""
        named = _named(request)
        if named is None:
            return _not_a_name()
        namespace, name = named
        form = await _form(request)
        if form is None:
            return HTMLResponse("the form must be urlencoded and under 16 KiB", status_code=400)
        if not check_csrf(self.guard, request, form.get(CSRF_FIELD)):
            return HTMLResponse("CSRF token missing or wrong: reload the page", status_code=403)
        call_id, decision = form.get("call_id"), form.get("decision")
        digest, reason = form.get("digest"), form.get("reason")
        if not isinstance(call_id, str) or decision not in ("Approve", "Reject"):
            return HTMLResponse("the form needs call_id and decision (Approve or Reject)", 400)
        notice, refusal, status_code = "", "", 200
        try:
            created = await approvecli.decide(
                self.access.kube,
                namespace,
                name,
                call_id,
                str(decision),
                reason[:MAX_REASON] if isinstance(reason, str) and reason else None,
                digest=digest if isinstance(digest, str) and digest else None,
            )
            notice = f"toolapproval/{created['metadata']['name']} created ({decision} {call_id})"
        except approvecli.Refused as exc:
            refusal, status_code = str(exc), 409
        except ApiError as exc:
            refusal, status_code = f"The API server refused: {refusal_text(exc)}", exc.status or 502
        context, _ = await self._task_context(namespace, name)
        return await self.render(
            request, "task.html", status_code, notice=notice, action_refusal=refusal, **context
        )

    # -- Agents and approvals ----------------------------------------------------------------

    async def agents(self, request: Request) -> Response:
        agents, policies, tasks = await asyncio.gather(
            self.access.in_scope("Agent"),
            self.access.in_scope("AgentPolicy"),
            self.access.in_scope("Task"),
        )
        rows = present.agent_rows(agents.items, policies.items, tasks.items)
        problems = agents.problems + policies.problems + tasks.problems
        return await self.render(request, "agents.html", agents=rows, problems=problems)

    async def approvals(self, request: Request) -> Response:
        listing = await self.access.in_scope("Task")
        waiting = [
            (present.task_row(t), pending)
            for t in listing.items
            for pending in present.status(t).get("pendingApprovals") or []
            if isinstance(pending, dict) and present.status(t).get("phase") == "Running"
        ]
        waiting.sort(key=lambda item: (item[0].namespace, item[0].name))
        return await self.render(
            request,
            "approvals.html",
            waiting=waiting,
            problems=listing.problems,
            live_source=f"/live/tasks?rv={listing.version}",
            live_page="/approvals",
        )
