"""A small async Kubernetes API client on httpx, authenticated like kopf (same login).

The operator needs a handful of verbs on a handful of resources; httpx keeps them explicit
and fast. Errors carry the status code and the API's reason, never request bodies.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import kopf

from ..api import GROUP, KINDS, VERSION

RETRY_ATTEMPTS = 5
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
CORE = {"Secret": "secrets", "ConfigMap": "configmaps", "Event": "events"}


class ApiError(Exception):
    """A Kubernetes API error: `status` is the HTTP status, `reason` the API's reason."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409


def path(kind: str, namespace: str, name: str | None = None, subresource: str | None = None) -> str:
    if kind in KINDS:
        base = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{KINDS[kind].plural}"
    elif kind == "Lease":
        base = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    elif kind in CORE:
        base = f"/api/v1/namespaces/{namespace}/{CORE[kind]}"
    else:
        raise ValueError(f"unknown kind {kind!r}")
    if name:
        base += f"/{name}"
    if subresource:
        base += f"/{subresource}"
    return base


def _ssl_context(info: kopf.ConnectionInfo, keep: list[Any]) -> ssl.SSLContext | bool:
    if info.insecure:
        return False
    ctx = ssl.create_default_context()
    if info.ca_path:
        ctx.load_verify_locations(cafile=str(info.ca_path))
    elif info.ca_data:
        data = info.ca_data
        text = data.decode() if isinstance(data, bytes) else data
        if "BEGIN CERTIFICATE" not in text:
            text = base64.b64decode(text).decode()
        ctx.load_verify_locations(cadata=text)
    cert = info.certificate_path
    key = info.private_key_path
    if info.certificate_data and info.private_key_data:
        cert = _tempfile(info.certificate_data, keep)
        key = _tempfile(info.private_key_data, keep)
    if cert and key:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


def _tempfile(data: str | bytes, keep: list[Any]) -> str:
    raw = data if isinstance(data, bytes) else data.encode()
    if b"-----BEGIN" not in raw:
        raw = base64.b64decode(raw)
    handle = tempfile.NamedTemporaryFile(prefix="ordo-", suffix=".pem")  # noqa: SIM115
    handle.write(raw)
    handle.flush()
    keep.append(handle)
    return handle.name


def login() -> kopf.ConnectionInfo:
    """In-cluster service account if present, else the kubeconfig (KUBECONFIG)."""
    settings = kopf.OperatorSettings()
    if Path("/var/run/secrets/kubernetes.io/serviceaccount/token").exists():
        info = kopf.login_with_service_account(settings=settings)
        if info is not None:
            return info
    info = kopf.login_with_kubeconfig(settings=settings)
    if info is None:
        raise kopf.LoginError("no kubeconfig and no in-cluster service account found")
    return info


class KubeClient:
    """Async client for the verbs ordo uses. Re-logs in once on 401 (rotated tokens)."""

    def __init__(
        self,
        info: kopf.ConnectionInfo,
        *,
        relogin: Callable[[], kopf.ConnectionInfo] | None = None,
        max_connections: int = 64,
    ) -> None:
        self._relogin = relogin
        self._max_connections = max_connections
        self.requests: dict[str, int] = {}
        """Requests by verb (get, list, patch, patch-status, create, replace, delete)."""
        self.on_request: Callable[[str], None] | None = None
        """Called with the verb of every request (the operator counts them in a metric)."""
        self._client = self._build(info)

    def _build(self, info: kopf.ConnectionInfo) -> httpx.AsyncClient:
        self._keep: list[Any] = []
        headers = {"Accept": "application/json", "User-Agent": "ordo-operator"}
        if info.token:
            headers["Authorization"] = f"{info.scheme or 'Bearer'} {info.token}"
        auth = (
            httpx.BasicAuth(info.username, info.password)
            if info.username and info.password
            else None
        )
        return httpx.AsyncClient(
            base_url=info.server,
            headers=headers,
            auth=auth,
            verify=_ssl_context(info, self._keep),
            timeout=httpx.Timeout(30.0),
            limits=httpx.Limits(
                max_connections=self._max_connections,
                max_keepalive_connections=self._max_connections,
            ),
        )

    async def close(self) -> None:
        await self._client.aclose()

    async def _send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """Send with bounded retries on 429, 5xx and connection errors (Retry-After honoured)."""
        delay = 0.2
        for attempt in range(1, RETRY_ATTEMPTS + 1):
            try:
                response = await self._client.request(method, url, **kwargs)
            except httpx.TransportError:
                if attempt == RETRY_ATTEMPTS:
                    raise
            else:
                if response.status_code not in RETRY_STATUSES or attempt == RETRY_ATTEMPTS:
                    return response
                retry_after = response.headers.get("Retry-After", "")
                if retry_after.isdigit():
                    delay = min(float(retry_after), 10.0)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")

    async def _request(self, verb: str, method: str, url: str, **kwargs: Any) -> Any:
        self.requests[verb] = self.requests.get(verb, 0) + 1
        if self.on_request is not None:
            self.on_request(verb)
        response = await self._send(method, url, **kwargs)
        if response.status_code == 401 and self._relogin is not None:
            await self._client.aclose()
            self._client = self._build(self._relogin())
            response = await self._send(method, url, **kwargs)
        if response.status_code >= 400:
            try:
                body = response.json()
                reason, message = str(body.get("reason", "")), str(body.get("message", ""))
            except ValueError:
                reason, message = "", response.text[:200]
            raise ApiError(response.status_code, reason, message)
        return response.json() if response.content else None

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = await self._request("get", "GET", path(kind, namespace, name))
        except ApiError as exc:
            if exc.not_found:
                return None
            raise
        return result

    async def list(
        self, kind: str, namespace: str, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        params = {"labelSelector": label_selector} if label_selector else None
        result = await self._request("list", "GET", path(kind, namespace), params=params)
        items: list[dict[str, Any]] = result.get("items", [])
        return items

    async def create(self, kind: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await self._request(
            "create", "POST", path(kind, namespace), json=body
        )
        return result

    async def replace(
        self, kind: str, namespace: str, name: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        result: dict[str, Any] = await self._request(
            "replace", "PUT", path(kind, namespace, name), json=body
        )
        return result

    async def delete(
        self, kind: str, namespace: str, name: str, *, resource_version: str | None = None
    ) -> None:
        """Delete; with `resource_version`, only if the object was not changed since (else 409)."""
        options = (
            {"preconditions": {"resourceVersion": resource_version}} if resource_version else None
        )
        try:
            await self._request("delete", "DELETE", path(kind, namespace, name), json=options)
        except ApiError as exc:
            if not exc.not_found:
                raise

    async def patch(
        self, kind: str, namespace: str, name: str, patch: dict[str, Any], *, status: bool = False
    ) -> dict[str, Any]:
        """JSON merge patch of the object, or of its status subresource. Include
        `metadata.resourceVersion` in `patch` to make it conditional (409 on conflict)."""
        result: dict[str, Any] = await self._request(
            "patch-status" if status else "patch",
            "PATCH",
            path(kind, namespace, name, "status" if status else None),
            content=json.dumps(patch),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        return result

    async def list_tasks_probe(self, namespace: str | None) -> None:
        """List at most one Task (in `namespace`, or across all): a cheap RBAC-aware probe."""
        url = path("Task", namespace) if namespace else f"/apis/{GROUP}/{VERSION}/tasks"
        await self._request("list", "GET", url, params={"limit": "1"})

    async def version(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("get", "GET", "/version")
        return result
