"""The console's Starlette app: routes, static files, and the guard around all of them."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .pages import Console
from .security import GuardMiddleware


def build(console: Console) -> Starlette:
    """The app serving `console`'s pages; every request passes `GuardMiddleware` first."""
    routes = [
        Route("/", console.tasks),
        Route("/live/tasks", console.tasks_live),
        Route("/tasks/{namespace}/{name}", console.task),
        Route("/live/tasks/{namespace}/{name}", console.task_live),
        Route("/tasks/{namespace}/{name}/decide", console.decide, methods=["POST"]),
        Route("/agents", console.agents),
        Route("/approvals", console.approvals),
        Mount("/static", StaticFiles(packages=[("ordo.console", "static")]), name="static"),
    ]
    return Starlette(routes=routes, middleware=[Middleware(GuardMiddleware, guard=console.guard)])
