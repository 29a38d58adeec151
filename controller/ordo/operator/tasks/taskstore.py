"""The ObjectStore for the processing of one Task.

The GitOps pre-check before the claim (references.py) resolves a new Task and the run uses
that snapshot; a resumed Task, or one whose pre-check made no snapshot (grace 0, a reason
waiting cannot fix), is resolved by the run, and approvals read through the same store.
Objects come from the watch-fed cache, which costs no request; Secrets do not (the operator
may not list or watch them), so each Secret key is read from the API at most once per
destination here (`credentials.release` decides, in the inner store). Values are kept for this
one Task's processing only (a retry, a resume or the next Task reads again), and only values
that exist: a key that was missing is read again, so a Secret created meanwhile is seen.
Under `--credential-policy Warn` the first release of each key with a warning is reported
(`on_warning`: a Warning Event on the Task and the violations metric)."""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable
from typing import Any

from ...credentials import Destination, Release
from ...runtime.store import DescribesSecrets, ObjectStore
from .writer import TaskWriter

OnWarning = Callable[[Release], Awaitable[None]]


def credential_warning(writer: TaskWriter, body: dict[str, Any]) -> OnWarning:
    """The Warn-mode report of one Task's Secret read: a Warning Event on the Task (names the
    Secret and host, as the referrer's Ready message does; never a value) and one count of
    `ordo_credential_violations_total{kind}`."""

    async def report(released: Release) -> None:
        writer.metrics.credential_violations.labels(released.violation or "unlabelled").inc()
        message = f"sent under --credential-policy Warn; Enforce refuses: {released.warning}"
        await writer.recorder.post(body, "CredentialNotAllowed", message, warning=True)

    return report


class SecretsReadOnce:
    """`store`, with each Secret key that exists read at most once per destination."""

    def __init__(self, store: ObjectStore, on_warning: OnWarning | None = None) -> None:
        self._store = store
        self._values: dict[tuple[str, str, str, Destination | None], Release] = {}
        self._on_warning = on_warning

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._store.get(kind, namespace, name)

    async def list(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        return await self._store.list(kind, namespace)

    async def credential(
        self, namespace: str, name: str, key: str, dest: Destination | None
    ) -> Release:
        known = self._values.get((namespace, name, key, dest))
        if known is not None:
            return known
        released = await self._store.credential(namespace, name, key, dest)
        if released.value is not None:
            self._values[(namespace, name, key, dest)] = released
        if released.warning is not None and self._on_warning is not None:
            await self._on_warning(released)
        return released

    async def secret_keys(self, namespace: str, name: str) -> builtins.list[str] | None:
        if isinstance(self._store, DescribesSecrets):
            return await self._store.secret_keys(namespace, name)
        return [""]  # fetch.credential's "cannot tell": the plain message

    def secret_hint(self, name: str, key: str) -> str:
        return (
            self._store.secret_hint(name, key) if isinstance(self._store, DescribesSecrets) else ""
        )
