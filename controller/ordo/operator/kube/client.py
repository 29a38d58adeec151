"""A small async Kubernetes API client on httpx, authenticated like kopf (same login).

The operator needs a handful of verbs on a handful of resources; httpx keeps them explicit.
httpx builds each request and parses its response; requests go straight to the transport
(`session.Session`, not through `httpx.AsyncClient`), and the bytes go over aiohttp
(`kube/transport`: about half the CPU of httpcore). Errors carry the status code and the
API's reason, never request bodies. Paths are in `kube/paths`, watch lines in
`kube/watchlines`.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import AsyncGenerator, Callable
from typing import Any

import httpx

from ...api import GROUP, VERSION
from .auth import login
from .errors import ApiError, Fenced, patch_test_failed, response_error, transport_error
from .paths import collection_path, path, pointer_token
from .session import RETRY_ATTEMPTS, Session
from .watchlines import events

__all__ = [
    "RETRY_ATTEMPTS",
    "ApiError",
    "Fenced",
    "JsonPatch",
    "KubeClient",
    "collection_path",
    "login",
    "patch_test_failed",
    "path",
    "pointer_token",
]

METADATA_LIST_ACCEPT = (
    "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"
)
"""Ask for the metadata of the objects a collection request returns, not the objects."""

JsonPatch = list[dict[str, Any]]
"""RFC 6902 operations."""


class KubeClient(Session):
    """Async client for the verbs ordo uses. Re-logs in once on 401 (rotated tokens).

    Every failure surfaces as `ApiError` (see `ApiError.transient`), or `Fenced` from the
    fenced writes. Retries: a request that is safe to repeat (reads, and writes whose second
    application changes nothing) is retried up to `RETRY_ATTEMPTS` times with backoff on
    transport errors, 429 and 5xx (Retry-After honoured). Any other write is retried only
    when it certainly was not applied (429, or the connection was never established); after
    any other transient failure it may or may not have been applied, and the caller decides.
    """

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
        self,
        kind: str,
        namespace: str,
        label_selector: str | None = None,
        *,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        params = {"labelSelector": label_selector} if label_selector else {}
        if field_selector:
            params["fieldSelector"] = field_selector
        result = await self._request(
            "list", "GET", path(kind, namespace), params=params or None, idempotent=True
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

    async def username(self) -> str:
        """The user name the API server authenticates this client as (a SelfSubjectReview,
        authentication.k8s.io/v1, which every authenticated user may create); "" if the
        server does not say."""
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        result = await self._request(
            "create",
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            json=review,
            idempotent=True,  # creates nothing: asking twice is as good as once
        )
        user = ((result or {}).get("status") or {}).get("userInfo") or {}
        name = user.get("username")
        return name if isinstance(name, str) else ""

    async def review(self, api_path: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create a review (a TokenReview, a SubjectAccessReview) at `api_path` and return
        the answer. The API server stores nothing, so it is retried like a read."""
        result: dict[str, Any] = await self._request(
            "create", "POST", api_path, json=body, idempotent=True
        )
        return result

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
        field_selector: str | None = None,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Watch events (`{"type": ..., "object": ...}`, bookmarks included) of an ordo `kind`
        in `namespace` (None: all) after `resource_version`, until the server ends the
        stream (after about `timeout_seconds`); `field_selector` narrows it (say, to one object by
        `metadata.name`). `on_open` is called once the API accepted
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
        if field_selector:
            params["fieldSelector"] = field_selector
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
                async for event in events(response):
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

    async def namespaces(self) -> builtins.list[str]:
        """The names of the cluster's namespaces (needs `list namespaces`)."""
        result = await self._request("list", "GET", "/api/v1/namespaces", idempotent=True)
        return [
            str(item["metadata"]["name"])
            for item in result.get("items") or []
            if isinstance((item.get("metadata") or {}).get("name"), str)
        ]

    async def version(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("get", "GET", "/version", idempotent=True)
        return result
