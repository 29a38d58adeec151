"""The ObjectStore the engine resolves references through, over the Kubernetes API."""

from __future__ import annotations

import builtins
from typing import Any

from ...credentials import Destination, Policy, Release, release, visible_keys
from ...errors import StoreError
from .client import ApiError, KubeClient


class KubeStore:
    """Reads ordo objects and Secret keys in one namespace at a time (the Task's). Secret
    values leave it only through `credentials.release`, under `policy`."""

    def __init__(self, client: KubeClient, policy: Policy = "Enforce") -> None:
        self._client = client
        self.policy: Policy = policy

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if kind == "Secret":  # values go out only for a destination: `credential`
            raise StoreError(f"Secret {name!r}: read through credential(), not get()")
        try:
            return await self._client.get(kind, namespace, name)
        except (ApiError, OSError) as exc:
            raise StoreError(f"{kind} {name!r}: {exc}") from None

    async def list(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        try:
            return await self._client.list(kind, namespace)
        except (ApiError, OSError) as exc:
            raise StoreError(f"{kind} list: {exc}") from None

    async def _secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self._client.get("Secret", namespace, name)
        except ApiError as exc:
            raise StoreError(f"Secret {name!r}: {exc.status} {exc.api_reason}") from None
        except OSError as exc:
            raise StoreError(f"Secret {name!r}: {type(exc).__name__}") from None

    async def credential(
        self, namespace: str, name: str, key: str, dest: Destination | None
    ) -> Release:
        return release(await self._secret(namespace, name), name, key, dest, self.policy)

    async def secret_keys(self, namespace: str, name: str) -> builtins.list[str] | None:
        """The Secret's key names (never values), or None when it does not exist or is not
        opted in (Enforce)."""
        return visible_keys(await self._secret(namespace, name), self.policy)

    def secret_hint(self, name: str, key: str) -> str:
        return ""  # the message names the namespace; nothing else to add in a cluster
