"""The gateway's ASGI app (Starlette): per served Agent, its card (the SDK's card route) and
its JSON-RPC endpoint (the SDK's dispatcher, v1.0 and 0.3 names), behind a rate limit per
client address (429, before any Kubernetes API request), authentication (401), a rate limit
per caller (429) and an authorization of the method (403). Each answer is counted
(metrics.py).

An Agent that does not opt in (`spec.a2a.enabled`) answers 404, as a missing one does, and
so does a namespace outside `--namespace`. Refusals carry no detail; tokens and content are
never logged.

`POST /hooks/{namespace}/{name}` takes TaskWebhook deliveries (hooks.py): signed with a
shared Secret, not authenticated as Kubernetes users; the client-address rate limit applies
to them too."""

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
from .hooks import Hooks
from .limits import CallerLimits
from .metrics import GatewayMetrics
from .reviews import Reviewer
from .tokencache import TokenCache
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
    client_rate: float = 20.0
    """JSON-RPC requests per second per client address, before authentication (0: unlimited)."""
    client_burst: int = 50
    token_cache_ttl: float = 30.0
    """Seconds a successful TokenReview is reused (0: review every request; at most 60)."""
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
    def __init__(
        self, kube: KubeClient, config: GatewayConfig, metrics: GatewayMetrics | None = None
    ) -> None:
        self._kube = kube
        self._config = config
        self._reviewer = Reviewer(kube, config.audiences, TokenCache(config.token_cache_ttl))
        self._limits = CallerLimits(config.rate, config.burst)
        self._clients = CallerLimits(config.client_rate, config.client_burst)
        self.metrics = metrics or GatewayMetrics()
        self.hooks = Hooks(kube, config.namespaces, self.metrics, self._clients)

    def app(self) -> Starlette:
        prefix = "/a2a/{namespace}/{agent}"
        return Starlette(
            routes=[
                Route("/healthz", self._health, methods=["GET"]),
                Route(prefix + "/.well-known/agent-card.json", self._card_counted, methods=["GET"]),
                Route(prefix, self._rpc_counted, methods=["POST"]),
                Route("/hooks/{namespace}/{name}", self.hooks.handle, methods=["POST"]),
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

    async def _card_counted(self, request: Request) -> Response:
        response = await self._card(request)
        self.metrics.requests.labels(method="agentCard", code=str(response.status_code)).inc()
        return response

    def _reject(self, kind: str, status: int, headers: dict[str, str]) -> Response:
        self.metrics.rejections.labels(kind=kind).inc()
        return _plain(status, headers)

    async def _rpc_counted(self, request: Request) -> Response:
        known: list[str] = ["unknown"]
        response = await self._rpc(request, known)
        self.metrics.requests.labels(method=known[0], code=str(response.status_code)).inc()
        return response

    async def _rpc(self, request: Request, known: list[str]) -> Response:
        """Answer a JSON-RPC request; `known[0]` is set to the method's metric label once the
        body is read."""
        address = request.client.host if request.client else ""
        if not self._clients.admit(address):
            return self._reject("clientRateLimited", 429, {"Retry-After": "1"})
        token = _bearer(request)
        caller = await self._reviewer.authenticate(token) if token else None
        if caller is None:
            return self._reject("unauthenticated", 401, {"WWW-Authenticate": 'Bearer realm="ordo"'})
        if not self._limits.admit(caller.username):
            return self._reject("rateLimited", 429, {"Retry-After": "1"})
        namespace = request.path_params["namespace"]
        agent = await self._served(request)
        if isinstance(agent, Response):
            return agent
        try:
            method = _method(await request.json())
        except (ValueError, UnicodeDecodeError):
            method = ""
        known[0] = method if method in VERBS or method in READS else "other"
        if not await self._reviewer.allowed(caller, namespace, VERBS.get(method, "get")):
            return self._reject("forbidden", 403, {})
        name = agent["metadata"]["name"]
        created = self.metrics.tasks_created.labels(namespace=namespace, agent=name)
        handler = AgentTasks(
            self._kube, namespace, name, caller, self._config.max_depth, created.inc
        )
        dispatcher = JsonRpcDispatcher(handler, enable_v0_3_compat=True)
        with server_span(request.headers, namespace, name, known[0]):
            return await dispatcher.handle_requests(request)


def dumps_config(config: GatewayConfig) -> str:
    """The configuration for the start-up log line (it holds no secret)."""
    return json.dumps(
        {
            "namespaces": list(config.namespaces) or "all",
            "audiences": list(config.audiences),
            "rate": config.rate,
            "burst": config.burst,
            "clientRate": config.client_rate,
            "clientBurst": config.client_burst,
            "tokenCacheTTL": config.token_cache_ttl,
        }
    )
