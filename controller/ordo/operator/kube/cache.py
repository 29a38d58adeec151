"""The operator's watch-fed cache of the configuration kinds, and the ObjectStore over it.

`ObjectCache` runs one informer (informer.py) per cached kind and watched namespace, or one
per kind across all namespaces when the operator watches the whole cluster (as its kopf
watches do). `CachedStore` resolves references from it: a Task costs no GET or LIST of the
kinds in CACHED_KINDS, only the Secrets it names (read on demand: the operator may not list or watch
Secrets).

Fail closed: reading a kind whose informer is not synced (first LIST not done yet, or the
watch broken and not yet resumed) raises `NotSynced`, a `StoreError`. Resolution maps it to
the Task's reason (`PolicyUnavailable` for AgentPolicies; the cannot-decide state of
governance for roles and ToolPermissions): an unreadable cache is never read as "not
found" or "empty". The scheduler claims no Task of a namespace until its caches are synced,
and /readyz answers 503 meanwhile.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Iterable
from typing import Any

from ...credentials import Destination, Policy, Release
from ...errors import StoreError
from ..telemetry.metrics import Metrics
from .client import KubeClient
from .informer import Body, Informer, cancel_all, run_all
from .store import KubeStore

CACHED_KINDS: tuple[str, ...] = (
    "Agent",
    "ModelEndpoint",
    "Tool",
    "AgentRole",
    "ToolPermission",
    "AgentPolicy",
    "Memory",
    "ToolApproval",
    "Guardrail",
)
"""The kinds read from the cache. Adding one: name it here (the operator's RBAC must grant
list and watch on it, or the cache never syncs and no Task runs)."""


class NotSynced(StoreError):
    """A cached kind cannot be read: its informer has not listed yet, or lost its watch."""

    def __init__(self, kind: str, namespace: str) -> None:
        super().__init__(
            f"the operator's cache of {kind} in namespace {namespace!r} is not synced "
            "(watch not established or broken); failing closed"
        )
        self.kind = kind
        self.namespace = namespace


class ObjectCache:
    """The informers of one operator process. `start()` launches them (it does not wait for
    them to sync); `stop()` cancels them."""

    def __init__(
        self,
        client: KubeClient,
        namespaces: Iterable[str] | None,
        *,
        kinds: Iterable[str] = CACHED_KINDS,
        metrics: Metrics | None = None,
        backoff: tuple[float, float] | None = None,
    ) -> None:
        """`namespaces`: the watched namespaces, or None for the whole cluster."""
        self.kinds = tuple(kinds)
        self.namespaces = None if namespaces is None else tuple(sorted(set(namespaces)))
        self._metrics = metrics
        extra: dict[str, Any] = {} if backoff is None else {"backoff": backoff}
        scopes: tuple[str | None, ...] = self.namespaces if self.namespaces is not None else (None,)
        self.informers: dict[tuple[str, str | None], Informer] = {
            (kind, ns): Informer(
                client, kind, ns, on_state=self._state, on_restart=self._restart, **extra
            )
            for kind in self.kinds
            for ns in scopes
        }
        self._tasks: list[asyncio.Task[None]] = []
        self._tick = asyncio.Event()
        if metrics is not None:
            for kind in self.kinds:
                metrics.cache_synced.labels(kind).set(0)

    async def start(self) -> None:
        self._tasks += run_all(
            (f"ordo-informer-{kind}-{ns or '*'}", informer)
            for (kind, ns), informer in self.informers.items()
        )

    async def stop(self) -> None:
        await cancel_all(self._tasks)

    # -- lookups ----------------------------------------------------------------------------

    def informer(self, kind: str, namespace: str) -> Informer | None:
        """The informer that holds `kind` in `namespace` (None: not watched here)."""
        scope = namespace if self.namespaces is not None else None
        return self.informers.get((kind, scope))

    def synced(self, namespace: str | None = None) -> bool:
        """Every informer that serves `namespace` (None: every informer) is synced."""
        if namespace is None or self.namespaces is None:
            return all(i.synced for i in self.informers.values())
        if namespace not in self.namespaces:
            return False  # not watched here: nothing to read
        return all(self.informers[kind, namespace].synced for kind in self.kinds)

    def unsynced(self) -> list[str]:
        """`Kind` or `Kind/namespace` of every informer that is not synced."""
        return [
            kind if ns is None else f"{kind}/{ns}"
            for (kind, ns), informer in sorted(self.informers.items(), key=lambda kv: str(kv[0]))
            if not informer.synced
        ]

    async def wait_synced(self, namespace: str | None = None) -> None:
        """Return once `synced(namespace)` (woken by the informers, no polling)."""
        while not self.synced(namespace):
            await self._tick.wait()

    async def wait_caught_up(self, kind: str, namespace: str, resource_version: str) -> None:
        """Return once the informer of `kind` in `namespace` is synced and has applied the
        events up to `resource_version` (say, of a change another watch reported first).
        resourceVersions are compared as the integers etcd makes them; anything else, or a
        kind not cached here, returns at once."""
        informer = self.informer(kind, namespace)
        try:
            target = int(resource_version)
        except ValueError:
            return
        if informer is None:
            return

        def reached() -> bool:
            try:
                return informer.synced and int(informer.resource_version or 0) >= target
            except ValueError:
                return True

        await informer.wait_until(reached)

    def get(self, kind: str, namespace: str, name: str) -> Body | None:
        return self._read(kind, namespace).get(namespace, name)

    def list(self, kind: str, namespace: str) -> list[Body]:
        return self._read(kind, namespace).list(namespace)

    def _read(self, kind: str, namespace: str) -> Informer:
        informer = self.informer(kind, namespace)
        if informer is None or not informer.synced:
            raise NotSynced(kind, namespace)
        return informer

    # -- informer callbacks -----------------------------------------------------------------

    def _state(self, informer: Informer) -> None:
        if self._metrics is not None:
            same = [i for (k, _), i in self.informers.items() if k == informer.kind]
            self._metrics.cache_synced.labels(informer.kind).set(
                1 if all(i.synced for i in same) else 0
            )
        tick, self._tick = self._tick, asyncio.Event()
        tick.set()

    def _restart(self, kind: str, reason: str) -> None:
        if self._metrics is not None:
            self._metrics.cache_watch_restarts.labels(kind, reason).inc()


class CachedStore:
    """An ObjectStore (and DescribesSecrets) over an `ObjectCache`: the cached kinds from
    memory (NotSynced when unreadable), Secrets and any other kind through the API."""

    def __init__(self, cache: ObjectCache, client: KubeClient, policy: Policy = "Enforce") -> None:
        self.cache = cache
        self._api = KubeStore(client, policy)

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if kind in self.cache.kinds:
            return self.cache.get(kind, namespace, name)
        return await self._api.get(kind, namespace, name)

    async def list(self, kind: str, namespace: str) -> builtins.list[dict[str, Any]]:
        if kind in self.cache.kinds:
            return self.cache.list(kind, namespace)
        return await self._api.list(kind, namespace)

    async def credential(
        self, namespace: str, name: str, key: str, dest: Destination | None
    ) -> Release:
        return await self._api.credential(namespace, name, key, dest)

    async def secret_keys(self, namespace: str, name: str) -> builtins.list[str] | None:
        return await self._api.secret_keys(namespace, name)

    def secret_hint(self, name: str, key: str) -> str:
        return self._api.secret_hint(name, key)


__all__ = ["CACHED_KINDS", "CachedStore", "NotSynced", "ObjectCache"]
