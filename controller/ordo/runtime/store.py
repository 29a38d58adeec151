"""The object store interface used to resolve references: manifests from files for
`ordo run`, the Kubernetes API for the operator."""

from __future__ import annotations

from typing import Any, Protocol

from ..errors import StoreError

__all__ = ["ObjectStore", "StoreError"]


class ObjectStore(Protocol):
    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object as a dict, or None if it does not exist. Raises StoreError."""
        ...

    async def list(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        """Every object of `kind` in `namespace`. Raises StoreError."""
        ...

    async def secret_value(self, namespace: str, name: str, key: str) -> str | None:
        """The decoded value of a Secret key, or None if the Secret or key is missing."""
        ...
