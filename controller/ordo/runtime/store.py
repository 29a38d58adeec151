"""The object store interface used to resolve references: manifests from files for
`ordo run`, the Kubernetes API for the operator."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ..credentials import Destination, Release
from ..errors import StoreError

__all__ = ["DescribesSecrets", "ObjectStore", "StoreError"]


class ObjectStore(Protocol):
    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object as a dict, or None if it does not exist. Raises StoreError."""
        ...

    async def list(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        """Every object of `kind` in `namespace`. Raises StoreError."""
        ...

    async def credential(
        self, namespace: str, name: str, key: str, dest: Destination | None
    ) -> Release:
        """A Secret key's value for sending to `dest`, as `credentials.release` hands it out
        (the one place that decides; no store reads Secrets through `get`). Raises StoreError
        and credentials.CredentialRefused."""
        ...


@runtime_checkable
class DescribesSecrets(Protocol):
    """Optional: a store that can say more when a Secret key is missing, so the error tells
    "Secret missing" from "key missing" and what to do (`ordo run`: an environment variable)."""

    async def secret_keys(self, namespace: str, name: str) -> list[str] | None:
        """The names (never the values) of the Secret's keys, or None if it does not exist or
        (Enforce) is not opted in (`credentials.visible_keys`). Raises StoreError."""
        ...

    def secret_hint(self, name: str, key: str) -> str:
        """One sentence on how to provide the value in this front end ("" when none)."""
        ...
