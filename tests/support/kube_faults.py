"""Fault injection in front of the real Kubernetes API: an httpx transport that wraps the
real one (``KubeClient(..., wrap_transport=FaultTransport)``) and fails chosen requests.

Faults, one per matching request, in the order they were queued:

* ``REFUSED``: the connection cannot be established (``httpx.ConnectError``); nothing sent.
* ``RESET``: the connection is reset before the API server saw the request
  (``httpx.ReadError``); nothing applied, but the client cannot know that.
* ``LOST``: the request reaches the API server and is applied, then the connection is reset
  before the answer arrives (``httpx.ReadError``): the ambiguous case.
* ``TIMEOUT``: no answer in time (``httpx.ReadTimeout``); nothing applied.
* ``HTTP_500`` / ``HTTP_503`` / ``HTTP_429``: an error Status from "the API server" without
  forwarding the request; nothing applied.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

import httpx


class Fault(enum.Enum):
    REFUSED = "refused"
    RESET = "reset"
    LOST = "lost"
    TIMEOUT = "timeout"
    HTTP_500 = "500"
    HTTP_503 = "503"
    HTTP_429 = "429"


_STATUS = {Fault.HTTP_500: 500, Fault.HTTP_503: 503, Fault.HTTP_429: 429}


@dataclass
class _Rule:
    method: str | None
    path_contains: str | None
    faults: list[Fault]
    forever: Fault | None = None

    def matches(self, request: httpx.Request) -> bool:
        if self.method is not None and request.method != self.method:
            return False
        return self.path_contains is None or self.path_contains in request.url.path


@dataclass
class Injected:
    method: str
    path: str
    fault: Fault


@dataclass
class FaultTransport(httpx.AsyncBaseTransport):
    """Forwards to `inner` unless a queued fault matches the request."""

    inner: httpx.AsyncBaseTransport
    rules: list[_Rule] = field(default_factory=list)
    injected: list[Injected] = field(default_factory=list)
    forwarded: int = 0

    def fail(
        self,
        faults: Iterable[Fault],
        *,
        method: str | None = None,
        path_contains: str | None = None,
    ) -> None:
        """Fail the next matching requests with `faults`, one each, in order."""
        self.rules.append(_Rule(method, path_contains, list(faults)))

    def fail_always(
        self, fault: Fault, *, method: str | None = None, path_contains: str | None = None
    ) -> None:
        """Fail every matching request with `fault` until `clear()`."""
        self.rules.append(_Rule(method, path_contains, [], forever=fault))

    def clear(self) -> None:
        self.rules.clear()

    @property
    def pending(self) -> int:
        """Queued faults not injected yet."""
        return sum(len(rule.faults) for rule in self.rules)

    def _take(self, request: httpx.Request) -> Fault | None:
        for rule in self.rules:
            if not rule.matches(request):
                continue
            if rule.forever is not None:
                return rule.forever
            if rule.faults:
                return rule.faults.pop(0)
        return None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        fault = self._take(request)
        if fault is None:
            self.forwarded += 1
            return await self.inner.handle_async_request(request)
        self.injected.append(Injected(request.method, request.url.path, fault))
        if fault is Fault.REFUSED:
            raise httpx.ConnectError("injected: connection refused", request=request)
        if fault is Fault.RESET:
            raise httpx.ReadError("injected: connection reset by peer", request=request)
        if fault is Fault.TIMEOUT:
            raise httpx.ReadTimeout("injected: read timed out", request=request)
        if fault is Fault.LOST:
            self.forwarded += 1
            response = await self.inner.handle_async_request(request)
            await response.aread()
            await response.aclose()
            raise httpx.ReadError("injected: connection reset after the request", request=request)
        status = _STATUS[fault]
        return httpx.Response(
            status,
            json={
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "reason": "TooManyRequests" if status == 429 else "InternalError",
                "message": "injected fault",
                "code": status,
            },
            request=request,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()
