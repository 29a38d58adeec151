"""/healthz and /readyz on the health port, /metrics on the metrics port (aiohttp, on the
operator's event loop)."""

from __future__ import annotations

import contextlib
import errno
import time

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..kube.cache import ObjectCache
from ..kube.client import KubeClient
from .metrics import Metrics

SHOWN_UNSYNCED = 5
"""How many unsynced caches a /readyz answer names."""


class PortInUse(OSError):
    """A port the operator must serve is taken: the message names the flag that sets it."""


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
        self.cache: ObjectCache | None = None
        """The operator's watch-fed cache: /readyz fails until every informer is synced."""
        self._ready_until = 0.0

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        """Ready when the caches are synced and this identity can list Tasks where it watches
        (API reachable and RBAC in place); the Task probe's answer is cached for a few
        seconds."""
        if self.cache is not None and not self.cache.synced():
            names = self.cache.unsynced()
            shown = ", ".join(names[:SHOWN_UNSYNCED]) + (
                " ..." if len(names) > SHOWN_UNSYNCED else ""
            )
            return web.Response(status=503, text=f"caches not synced: {shown}\n")
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
        flags: dict[int, str] = {}
        if metrics_port is not None:
            flags[metrics_port] = "--metrics-port"
        if health_port is not None:
            flags[health_port] = "--health-port"
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
            self._runners.append(runner)
            try:
                await web.TCPSite(runner, self._host, port).start()
            except OSError as exc:
                await self.stop()
                if exc.errno == errno.EADDRINUSE:
                    raise PortInUse(
                        f"{flags[port]} {port} is in use on {self._host}: another process "
                        f"listens there; choose a free port with {flags[port]} (0 disables it)",
                    ) from None
                raise PortInUse(
                    f"{flags[port]} {port}: cannot listen on {self._host} ({exc.strerror})",
                ) from None

    async def stop(self) -> None:
        runners, self._runners = self._runners, []
        for runner in runners:
            with contextlib.suppress(Exception):
                await runner.cleanup()
