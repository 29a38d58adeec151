"""/healthz and /readyz on the health port, /metrics on the metrics port (aiohttp, on the
operator's event loop)."""

from __future__ import annotations

import contextlib
import time

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .kube import KubeClient
from .metrics import Metrics


class HealthServer:
    def __init__(
        self,
        client: KubeClient,
        metrics: Metrics,
        health_port: int | None,
        metrics_port: int | None,
        host: str = "0.0.0.0",
    ) -> None:
        self._client = client
        self._metrics = metrics
        self._ports = (health_port, metrics_port)
        self._host = host
        self._runners: list[web.AppRunner] = []
        self.namespaces: list[str] = []
        """Watched namespaces (empty: all), probed by /readyz."""
        self._ready_until = 0.0

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        """Ready when this identity can list Tasks where it watches (API reachable and RBAC
        in place); the answer is cached for a few seconds."""
        now = time.monotonic()
        if self._ready_until > now:
            return web.Response(text="ok\n")
        try:
            scopes: list[str | None] = list(self.namespaces) or [None]
            for namespace in scopes:
                await self._client.list_tasks_probe(namespace)
        except Exception as exc:
            status = getattr(exc, "status", None)
            why = f"HTTP {status}" if status else type(exc).__name__
            return web.Response(status=503, text=f"cannot list Tasks: {why}\n")
        self._ready_until = now + 5.0
        return web.Response(text="ok\n")

    async def _metrics_handler(self, _: web.Request) -> web.Response:
        body = generate_latest(self._metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def start(self) -> None:
        health_port, metrics_port = self._ports
        routes: dict[int, list[web.RouteDef]] = {}
        if health_port is not None:
            routes.setdefault(health_port, []).extend(
                [web.get("/healthz", self._healthz), web.get("/readyz", self._readyz)]
            )
        if metrics_port is not None:
            routes.setdefault(metrics_port, []).append(web.get("/metrics", self._metrics_handler))
        for port, defs in routes.items():
            app = web.Application()
            app.add_routes(defs)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, self._host, port).start()
            self._runners.append(runner)

    async def stop(self) -> None:
        for runner in self._runners:
            with contextlib.suppress(Exception):
                await runner.cleanup()
