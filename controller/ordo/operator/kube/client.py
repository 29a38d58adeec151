"""A small async Kubernetes API client on httpx, authenticated like kopf (same login).

The operator needs a handful of verbs on a handful of resources; httpx keeps them explicit.
httpx builds each request and parses its response; requests go straight to the transport
(`KubeClient._exchange`, not through `httpx.AsyncClient`), and the bytes go over aiohttp
(`kubetransport`: about half the CPU of httpcore). Errors carry the status code and the
API's reason, never request bodies.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import json
from collections.abc import AsyncGenerator, Callable
from typing import Any

import httpx
import kopf

from ...api import GROUP, KINDS, VERSION
from .auth import login, ssl_context
from .errors import ApiError, Fenced, patch_test_failed, response_error, transport_error
from .transport import AiohttpTransport

__all__ = [
    "ApiError",
    "Fenced",
    "KubeClient",
    "collection_path",
    "login",
    "patch_test_failed",
    "path",
]

RETRY_ATTEMPTS = 5
"""Attempts of a request that is safe to repeat (reads, idempotent writes)."""
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
CORE = {"Secret": "secrets", "ConfigMap": "configmaps", "Event": "events", "Pod": "pods"}
# Transport errors raised before any byte of the request reached the server: repeating the
# request cannot apply it twice, whatever the verb.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)

REQUEST_TIMEOUT = httpx.Timeout(30.0)
"""Connect, read and pool timeout of every request (a watch sets its own read timeout)."""
_TIMEOUT_EXTENSION = REQUEST_TIMEOUT.as_dict()

METADATA_LIST_ACCEPT = (
    "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"
)
"""Ask for the metadata of the objects a collection request returns, not the objects."""

JsonPatch = list[dict[str, Any]]
"""RFC 6902 operations."""


MAX_WATCH_EVENT_BYTES = 32 * 1024 * 1024
"""Longest watch event line (an object is at most about 1.5 MiB in etcd)."""


async def _lines(response: httpx.Response) -> AsyncGenerator[bytearray, None]:
    """The non-empty lines of a watch stream, as bytes: no decoding to text first, which
    was a fifth of what every watch event cost (`json.loads` reads UTF-8 bytes itself)."""
    pending = bytearray()
    async for chunk in response.aiter_bytes():
        pending += chunk
        start = 0
        while (end := pending.find(b"\n", start)) >= 0:
            line = pending[start:end]
            if line.strip():
                yield line
            start = end + 1
        del pending[:start]
        if len(pending) > MAX_WATCH_EVENT_BYTES:
            raise ApiError(200, "InvalidResponse", "watch event larger than the bound")
    if pending.strip():
        yield pending


def path(kind: str, namespace: str, name: str | None = None, subresource: str | None = None) -> str:
    if kind in KINDS:
        base = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{KINDS[kind].plural}"
    elif kind == "Lease":
        base = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    elif kind == "Job":
        base = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    elif kind in CORE:
        base = f"/api/v1/namespaces/{namespace}/{CORE[kind]}"
    else:
        raise ValueError(f"unknown kind {kind!r}")
    if name:
        base += f"/{name}"
    if subresource:
        base += f"/{subresource}"
    return base


class KubeClient:
    """Async client for the verbs ordo uses. Re-logs in once on 401 (rotated tokens).

    Every failure surfaces as `ApiError` (see `ApiError.transient`), or `Fenced` from the
    fenced writes. Retries: a request that is safe to repeat (reads, and writes whose second
    application changes nothing) is retried up to `RETRY_ATTEMPTS` times with backoff on
    transport errors, 429 and 5xx (Retry-After honoured). Any other write is retried only
    when it certainly was not applied (429, or the connection was never established); after
    any other transient failure it may or may not have been applied, and the caller decides.
    """

    def __init__(
        self,
        info: kopf.ConnectionInfo,
        *,
        relogin: Callable[[], kopf.ConnectionInfo] | None = None,
        max_connections: int = 64,
        wrap_transport: Callable[[httpx.AsyncBaseTransport], httpx.AsyncBaseTransport]
        | None = None,
        backoff: float = 0.2,
    ) -> None:
        """`wrap_transport` wraps the real HTTP transport (tests inject faults with it);
        `backoff` is the first delay between attempts (doubling, at most 5 s)."""
        self._relogin = relogin
        self._backoff = backoff
        self._max_connections = max_connections
        self._wrap_transport = wrap_transport
        self.requests: dict[str, int] = {}
        """Requests by verb (get, list, patch, patch-status, create, replace, delete); a
        retried request counts once."""
        self.on_request: Callable[[str], None] | None = None
        """Called with the verb of every request (the operator counts them in a metric)."""
        self._client = self._build(info)

    def _build(self, info: kopf.ConnectionInfo) -> httpx.AsyncClient:
        """The client for watches; requests go to its transport directly (`_send`)."""
        self._keep: list[Any] = []
        headers = {"Accept": "application/json", "User-Agent": "ordo-operator"}
        if info.token:
            headers["Authorization"] = f"{info.scheme or 'Bearer'} {info.token}"
        elif info.username and info.password:
            pair = f"{info.username}:{info.password}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        transport: httpx.AsyncBaseTransport = AiohttpTransport(
            ssl_context(info, self._keep), limit=self._max_connections
        )
        if self._wrap_transport is not None:
            transport = self._wrap_transport(transport)
        self._transport = transport
        self._base = str(info.server or "").rstrip("/")
        self._headers = headers
        return httpx.AsyncClient(
            base_url=info.server,
            headers=headers,
            transport=transport,
            timeout=REQUEST_TIMEOUT,
        )

    async def close(self) -> None:
        await self._client.aclose()

    async def _exchange(
        self,
        method: str,
        url: str,
        *,
        params: dict[str, str] | None = None,
        json: Any = None,
        content: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """One request, read to the end, straight through the transport: what
        `httpx.AsyncClient.request` adds (URL merging, auth flow, redirects, a cookie jar,
        event hooks) is a third of a request's CPU, and the API client needs none of it."""
        request = httpx.Request(
            method,
            self._base + url,
            params=params,
            json=json,
            content=content,
            headers={**self._headers, **headers} if headers else self._headers,
            extensions={"timeout": _TIMEOUT_EXTENSION},
        )
        response = await self._transport.handle_async_request(request)
        try:
            await response.aread()
        finally:
            await response.aclose()
        return response

    async def _send(
        self, method: str, url: str, *, idempotent: bool, **kwargs: Any
    ) -> httpx.Response:
        """Send, retrying what is safe to retry (see the class docstring)."""
        delay = self._backoff
        for attempt in range(1, RETRY_ATTEMPTS + 1):
            last = attempt == RETRY_ATTEMPTS
            try:
                response = await self._exchange(method, url, **kwargs)
            except httpx.HTTPError as exc:
                retry = isinstance(exc, _NOT_SENT) or (
                    idempotent and isinstance(exc, httpx.TransportError)
                )
                if last or not retry:
                    raise transport_error(exc) from None
            else:
                status = response.status_code
                if last or not (status == 429 or (idempotent and status in RETRY_STATUSES)):
                    return response
                retry_after = response.headers.get("Retry-After", "")
                if retry_after.isdigit():
                    delay = min(float(retry_after), 10.0)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")

    async def _request(
        self, verb: str, method: str, url: str, *, idempotent: bool, **kwargs: Any
    ) -> Any:
        self.requests[verb] = self.requests.get(verb, 0) + 1
        if self.on_request is not None:
            self.on_request(verb)
        response = await self._send(method, url, idempotent=idempotent, **kwargs)
        if response.status_code == 401 and self._relogin is not None:
            await self._client.aclose()
            self._client = self._build(self._relogin())
            response = await self._send(method, url, idempotent=idempotent, **kwargs)
        if response.status_code >= 400:
            raise response_error(response)
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise ApiError(response.status_code, "InvalidResponse", "non-JSON body") from None

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None if it does not exist."""
        try:
            result: dict[str, Any] = await self._request(
                "get", "GET", path(kind, namespace, name), idempotent=True
            )
        except ApiError as exc:
            if exc.not_found:
                return None
            raise
        return result

    async def list(
        self, kind: str, namespace: str, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        params = {"labelSelector": label_selector} if label_selector else None
        result = await self._request(
            "list", "GET", path(kind, namespace), params=params, idempotent=True
        )
        items: list[dict[str, Any]] = result.get("items", [])
        return items

    async def create(self, kind: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create (409 `conflict` if it exists). Not retried after a transient failure that may
        have been applied: a retry could answer 409 for our own object, so the caller decides
        (typically: read it back)."""
        result: dict[str, Any] = await self._request(
            "create", "POST", path(kind, namespace), json=body, idempotent=False
        )
        return result

    async def replace(
        self, kind: str, namespace: str, name: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        """Replace the object. With `metadata.resourceVersion` in `body` it is conditional (409
        if the object changed since) and is not retried after a transient failure: the write
        may have been applied, and a retry would then answer 409 for our own write. The
        caller decides (typically: read it back). Without a resourceVersion it is retried."""
        conditional = bool((body.get("metadata") or {}).get("resourceVersion"))
        result: dict[str, Any] = await self._request(
            "replace",
            "PUT",
            path(kind, namespace, name),
            json=body,
            idempotent=not conditional,
        )
        return result

    async def delete(
        self,
        kind: str,
        namespace: str,
        name: str,
        *,
        resource_version: str | None = None,
        propagation: str | None = None,
    ) -> None:
        """Delete; with `resource_version`, only if the object was not changed since (else 409).
        `propagation` is the propagationPolicy (`Background` deletes a Job's pods too; the
        API's default for Jobs orphans them). A missing object is not an error (so a retried
        delete that was applied is fine)."""
        options: dict[str, Any] | None = (
            {"preconditions": {"resourceVersion": resource_version}} if resource_version else None
        )
        if propagation is not None:
            options = {**(options or {}), "propagationPolicy": propagation}
        try:
            await self._request(
                "delete", "DELETE", path(kind, namespace, name), json=options, idempotent=True
            )
        except ApiError as exc:
            if not exc.not_found:
                raise

    async def delete_collection(self, kind: str, namespace: str, label_selector: str) -> int:
        """Delete every object of `kind` in `namespace` that `label_selector` selects, in one
        request; the number deleted. The answer lists the deleted objects' metadata only
        (`as=PartialObjectMetadataList`), not their contents. Retried after a transient
        failure: deleting again what is gone is no error."""
        result = await self._request(
            "deletecollection",
            "DELETE",
            path(kind, namespace),
            params={"labelSelector": label_selector},
            headers={"Accept": METADATA_LIST_ACCEPT},
            idempotent=True,
        )
        return len((result or {}).get("items") or [])

    async def patch(
        self, kind: str, namespace: str, name: str, patch: dict[str, Any], *, status: bool = False
    ) -> dict[str, Any]:
        """JSON merge patch of the object, or of its status subresource. Include
        `metadata.resourceVersion` in `patch` to make it conditional (409 on conflict); a
        conditional patch is not retried after a transient failure (it may have been
        applied: the caller decides), an unconditional one is (applying it twice is the same
        as once)."""
        conditional = bool((patch.get("metadata") or {}).get("resourceVersion"))
        result: dict[str, Any] = await self._request(
            "patch-status" if status else "patch",
            "PATCH",
            path(kind, namespace, name, "status" if status else None),
            content=json.dumps(patch),
            headers={"Content-Type": "application/merge-patch+json"},
            idempotent=not conditional,
        )
        return result

    async def patch_json(
        self,
        kind: str,
        namespace: str,
        name: str,
        ops: JsonPatch,
        *,
        status: bool = False,
        idempotent: bool = False,
    ) -> dict[str, Any]:
        """JSON Patch (RFC 6902) of the object or of its status subresource, applied
        atomically by the API server: if a `test` operation fails nothing is written and the
        API answers 422 Invalid (an `ApiError`).

        Pass `idempotent=True` only if applying `ops` twice has the effect of applying them
        once (say, `test`s of fields the ops do not change, and `add`/`replace` of fixed
        values); the request is then retried after transient failures. Otherwise it is
        retried only when it certainly was not applied, and after another transient failure
        the caller decides (the patch may have been applied)."""
        result: dict[str, Any] = await self._request(
            "patch-status" if status else "patch",
            "PATCH",
            path(kind, namespace, name, "status" if status else None),
            content=json.dumps(ops),
            headers={"Content-Type": "application/json-patch+json"},
            idempotent=idempotent,
        )
        return result

    async def patch_status_fenced(
        self,
        kind: str,
        namespace: str,
        name: str,
        execution_id: str,
        fields: dict[str, Any],
    ) -> dict[str, Any]:
        """Set top-level `status` fields only if `status.executionId` is still
        `execution_id`, atomically (one JSON Patch: a `test` of the executionId, then an `add`
        per field). Raises `Fenced` if another execution claimed the object meanwhile (or it
        has no executionId): nothing is written. Safe to retry (the ops never change the
        executionId), so it is retried after transient failures; any other failure is an
        `ApiError`. Returns the updated object."""
        if "executionId" in fields:
            raise ValueError("a fenced write cannot change status.executionId")
        pointer = "/status/executionId"
        ops: JsonPatch = [{"op": "test", "path": pointer, "value": execution_id}]
        ops += [
            {"op": "add", "path": "/status/" + pointer_token(key), "value": value}
            for key, value in fields.items()
        ]
        try:
            return await self.patch_json(kind, namespace, name, ops, status=True, idempotent=True)
        except ApiError as exc:
            if patch_test_failed(exc, pointer):
                raise Fenced(kind, name) from None
            raise

    async def list_versioned(
        self, kind: str, namespace: str | None, page_size: int = 500
    ) -> tuple[builtins.list[dict[str, Any]], str]:
        """Every object of an ordo `kind` in `namespace` (None: all namespaces) and the
        list's resourceVersion (where a watch starts), read in pages of `page_size`."""
        items: builtins.list[dict[str, Any]] = []
        params: dict[str, str] = {"limit": str(page_size)}
        version = ""
        while True:
            result = await self._request(
                "list", "GET", collection_path(kind, namespace), params=params, idempotent=True
            )
            items.extend(result.get("items") or [])
            meta = result.get("metadata") or {}
            version = version or str(meta.get("resourceVersion") or "")
            if not meta.get("continue"):
                return items, version
            params = {"limit": str(page_size), "continue": str(meta["continue"])}

    async def watch(
        self,
        kind: str,
        namespace: str | None,
        resource_version: str,
        *,
        timeout_seconds: int = 300,
        on_open: Callable[[], None] | None = None,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Watch events (`{"type": ..., "object": ...}`, bookmarks included) of an ordo `kind`
        in `namespace` (None: all) after `resource_version`, until the server ends the
        stream (after about `timeout_seconds`). `on_open` is called once the API accepted
        the watch. Not retried: a failed request raises `ApiError` (a transport failure mid
        stream too); the caller resumes or relists. An `ERROR` event is yielded as is."""
        self.requests["watch"] = self.requests.get("watch", 0) + 1
        if self.on_request is not None:
            self.on_request("watch")
        params = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
        }
        timeout = httpx.Timeout(10.0, read=timeout_seconds + 30.0)
        client = self._client
        try:
            async with client.stream(
                "GET", collection_path(kind, namespace), params=params, timeout=timeout
            ) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise response_error(response)
                if on_open is not None:
                    on_open()
                async for line in _lines(response):
                    try:
                        event = json.loads(line)
                    except ValueError:
                        raise ApiError(200, "InvalidResponse", "non-JSON watch event") from None
                    if isinstance(event, dict):
                        yield event
        except httpx.HTTPError as exc:
            raise transport_error(exc) from None
        except ApiError as exc:
            if exc.status == 401 and self._relogin is not None and client is self._client:
                self._client = self._build(self._relogin())  # a rotated token
                await client.aclose()
            raise

    async def list_tasks_probe(self, namespace: str | None) -> None:
        """List at most one Task (in `namespace`, or across all): a cheap RBAC-aware probe."""
        url = path("Task", namespace) if namespace else f"/apis/{GROUP}/{VERSION}/tasks"
        await self._request("list", "GET", url, params={"limit": "1"}, idempotent=True)

    async def version(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("get", "GET", "/version", idempotent=True)
        return result


def collection_path(kind: str, namespace: str | None) -> str:
    """The collection of an ordo `kind` in `namespace`, or across all namespaces (None)."""
    if namespace is not None:
        return path(kind, namespace)
    return f"/apis/{GROUP}/{VERSION}/{KINDS[kind].plural}"


def pointer_token(key: str) -> str:
    """`key` escaped as one JSON Pointer token (RFC 6901: `~` → `~0`, `/` → `~1`)."""
    return key.replace("~", "~0").replace("/", "~1")
