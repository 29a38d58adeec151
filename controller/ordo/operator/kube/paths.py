"""Where each kind lives on the Kubernetes API: the URL path of an object, a collection (in a
namespace or across all), a subresource; and the escaping of a JSON Pointer token."""

from __future__ import annotations

from ...api import GROUP, KINDS, VERSION

__all__ = ["CORE", "collection_path", "path", "pointer_token"]

CORE = {"Secret": "secrets", "ConfigMap": "configmaps", "Event": "events", "Pod": "pods"}
"""The core (`/api/v1`) kinds ordo reads or writes, by their plural."""


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


def collection_path(kind: str, namespace: str | None) -> str:
    """The collection of an ordo `kind` in `namespace`, or across all namespaces (None)."""
    if namespace is not None:
        return path(kind, namespace)
    return f"/apis/{GROUP}/{VERSION}/{KINDS[kind].plural}"


def pointer_token(key: str) -> str:
    """`key` escaped as one JSON Pointer token (RFC 6901: `~` → `~0`, `/` → `~1`)."""
    return key.replace("~", "~0").replace("/", "~1")
