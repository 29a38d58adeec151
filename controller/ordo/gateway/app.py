"""The gateway's ASGI app (Starlette): per served Agent, its card (the SDK's card route) and
its JSON-RPC endpoint (the SDK's dispatcher, v1.0 and 0.3 names), behind authentication
(401), a rate limit per caller (429) and an authorization of the method (403).

An Agent that does not opt in (`spec.a2a.enabled`) answers 404, as a missing one does, and
so does a namespace outside `--namespace`. Refusals carry no detail; tokens and content are
never logged."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from a2a.server.routes.agent_card_routes import create_agent_card_routes
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from ..operator.kube.client import ApiError, KubeClient
from .card import agent_card, served
from .handler import AgentTasks
from .limits import CallerLimits
from .reviews import Reviewer
from .traces import server_span

log = logging.getLogger(__name__)

VERBS = {
    "SendMessage": "create",
    "SendStreamingMessage": "create",
    "message/send": "create",
    "message/stream": "create",
    "ListTasks": "list",
    "tasks/list": "list",
    "CancelTask": "patch",
    "tasks/cancel": "patch",
}
"""The Task verb each method needs in the Agent's namespace; any other method needs `get`."""
READS = frozenset({"GetTask", "SubscribeToTask", "tasks/get", "tasks/resubscribe"})
"""The methods that need `get` (named in spans; any other name is recorded as "other")."""


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    namespaces: tuple[str, ...] = ()
    """Served namespaces (empty: all)."""
    audiences: tuple[str, ...] = ()
    """TokenReview audiences a caller's token must carry (empty: the API server's own)."""
    rate: float = 5.0
    """Requests per second per caller (0: unlimited)."""
    burst: int = 20
    public_url: str = ""
    """Where callers reach the gateway, for the card (empty: the request's own base URL)."""
    max_depth: int = 3
    """Delegation depth limit for callers that send their chain (engine/delegation.py)."""


def _plain(status: int, headers: dict[str, str] | None = None) -> Response:
    return PlainTextResponse(str(status), status_code=status, headers=headers)


def _bearer(request: Request) -> str:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _method(body: Any) -> str:
    method = body.get("method") if isinstance(body, dict) else None
    return method if isinstance(method, str) else ""


class Gateway:
    def __init__(self, kube: KubeClient, config: GatewayConfig) -> None:
        self._kube = kube
        self._config = config
        self._reviewer = Reviewer(kube, config.audiences)
        self._limits = CallerLimits(config.rate, config.burst)

    def app(self) -> Starlette:
        prefix = "/a2a/{namespace}/{agent}"
        return Starlette(
            routes=[
                Route("/healthz", self._health, methods=["GET"]),
                Route(prefix + "/.well-known/agent-card.json", self._card, methods=["GET"]),
                Route(prefix, self._rpc, methods=["POST"]),
            ]
        )

    async def _health(self, request: Request) -> Response:
        return PlainTextResponse("ok")

    async def _served(self, request: Request) -> dict[str, Any] | Response:
        """The served Agent the path names, or the response to give instead (404, 503)."""
        namespace = request.path_params["namespace"]
        if self._config.namespaces and namespace not in self._config.namespaces:
            return _plain(404)
        try:
            agent = await self._kube.get("Agent", namespace, request.path_params["agent"])
        except ApiError as exc:
            log.warning("gateway: reading the Agent failed (%s)", exc.status)
            return _plain(503)
        return agent if agent is not None and served(agent) else _plain(404)

    def _url(self, request: Request) -> str:
        base = self._config.public_url or str(request.base_url)
        path = f"a2a/{request.path_params['namespace']}/{request.path_params['agent']}"
        return f"{base.rstrip('/')}/{path}"

    async def _card(self, request: Request) -> Response:
        agent = await self._served(request)
        if isinstance(agent, Response):
            return agent
        route = create_agent_card_routes(agent_card(agent, self._url(request)))[0]
        response: Response = await route.endpoint(request)
        return response

    async def _rpc(self, request: Request) -> Response:
        token = _bearer(request)
        caller = await self._reviewer.authenticate(token) if token else None
        if caller is None:
            return _plain(401, {"WWW-Authenticate": 'Bearer realm="ordo"'})
        if not self._limits.admit(caller.username):
            return _plain(429, {"Retry-After": "1"})
        namespace = request.path_params["namespace"]
        agent = await self._served(request)
        if isinstance(agent, Response):
            return agent
        try:
            method = _method(await request.json())
        except (ValueError, UnicodeDecodeError):
            method = ""
        if not await self._reviewer.allowed(caller, namespace, VERBS.get(method, "get")):
            return _plain(403)
        handler = AgentTasks(
            self._kube, namespace, agent["metadata"]["name"], caller, self._config.max_depth
        )
        dispatcher = JsonRpcDispatcher(handler, enable_v0_3_compat=True)
        known = method if method in VERBS or method in READS else "other"
        with server_span(request.headers, namespace, agent["metadata"]["name"], known):
            return await dispatcher.handle_requests(request)


def dumps_config(config: GatewayConfig) -> str:
    """The configuration for the start-up log line (it holds no secret)."""
    return json.dumps(
        {
            "namespaces": list(config.namespaces) or "all",
            "audiences": list(config.audiences),
            "rate": config.rate,
            "burst": config.burst,
        }
    )
