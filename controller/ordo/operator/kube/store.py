"""The ObjectStore the engine resolves references through, over the Kubernetes API."""

from __future__ import annotations

import base64
import builtins
from typing import Any

from ...errors import StoreError
from .client import ApiError, KubeClient


class KubeStore:
    """Reads ordo objects and Secret keys in one namespace at a time (the Task's)."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
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

    async def secret_value(self, namespace: str, name: str, key: str) -> str | None:
        secret = await self._secret(namespace, name)
        if secret is None:
            return None
        data = secret.get("data") or {}
        if key not in data:
            return None
        return base64.b64decode(data[key]).decode()

    async def secret_keys(self, namespace: str, name: str) -> builtins.list[str] | None:
        """The Secret's key names (never values), or None when it does not exist."""
        secret = await self._secret(namespace, name)
        return None if secret is None else sorted(secret.get("data") or {})

    def secret_hint(self, name: str, key: str) -> str:
        return ""  # the message names the namespace; nothing else to add in a cluster
