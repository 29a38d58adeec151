"""The ObjectStore for the processing of one Task.

The GitOps pre-check before the claim (references.py) resolves a new Task and the run uses
that snapshot; a resumed Task, or one whose pre-check made no snapshot (grace 0, a reason
waiting cannot fix), is resolved by the run, and approvals read through the same store.
Objects come from the watch-fed cache, which costs no request; Secrets do not (the operator
may not list or watch them), so each Secret key is read from the API at most once here. Values are kept for this one Task's
processing only (a retry, a resume or the next Task reads again), and only values that
exist: a key that was missing is read again, so a Secret created meanwhile is seen."""

from __future__ import annotations

import builtins
from typing import Any

from ...runtime.store import DescribesSecrets, ObjectStore


class SecretsReadOnce:
    """`store`, with each Secret key that exists read at most once."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store
        self._values: dict[tuple[str, str, str], str] = {}

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._store.get(kind, namespace, name)

    async def list(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        return await self._store.list(kind, namespace)

    async def secret_value(self, namespace: str, name: str, key: str) -> str | None:
        known = self._values.get((namespace, name, key))
        if known is not None:
            return known
        value = await self._store.secret_value(namespace, name, key)
        if value is not None:
            self._values[(namespace, name, key)] = value
        return value

    async def secret_keys(self, namespace: str, name: str) -> builtins.list[str] | None:
        if isinstance(self._store, DescribesSecrets):
            return await self._store.secret_keys(namespace, name)
        return [""]  # fetch.secret's "cannot tell": the plain message

    def secret_hint(self, name: str, key: str) -> str:
        return (
            self._store.secret_hint(name, key) if isinstance(self._store, DescribesSecrets) else ""
        )
