"""Liveness per process: one `coordination.k8s.io` Lease per operator process, renewed every
few seconds, instead of one renewal per running Task.

A Task an operator process claims names that Lease in `status.lease.holderLease`
(`<namespace>/<name>`); the holder never renews the Task's own lease while it runs it, so the
liveness writes of a process are O(1), not O(in-flight Tasks). Another process takes such a
Task over only once the holder's Lease has lapsed (`task_lease_left`); a holder that is alive
but no longer runs one of its Tasks (a run that stopped, a worker that died) recovers it
itself: its scheduler sees its own holder on a Task it has no job for and resumes it.

- `ProcessLease`: this process's own Lease (created at startup, renewed every
  duration/RENEWALS_PER_PERIOD, deleted at shutdown); `valid_for()` is how long this process
  may still trust it by its own clock (the last successful renewal's send time + duration -
  a safety margin), which every run's `ExecutionLease` reads (lease.py).
- `PeerLeases`: the Leases of every operator process in the lease namespace (label
  `ordo.dev/operator-lease`), from a watch (kube/informer.py): when each holder's Lease
  lapses, and the live replicas that watch the same namespaces (annotation `ordo.dev/scope`)
  that new Tasks are split with. A Lease lapsed for GC_PERIODS is deleted by any replica.

Compatibility: the claim also writes `renewTime` and a `durationSeconds` of
HOLDER_LEASE_WAIT_FACTOR lease periods, which is all an ordo before process Leases reads; and
a claim that comes back without `holderLease` (a Task CRD that predates the field prunes it)
falls back to renewing the Task's own lease (ExecutionLease.per_task)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from ... import timestamps
from ..kube.client import ApiError, KubeClient
from ..kube.informer import Informer

log = logging.getLogger("ordo.operator")

LABEL = "ordo.dev/operator-lease"
"""On every process Lease (value "true"): how `PeerLeases` tells them from other Leases."""
SCOPE_ANNOTATION = "ordo.dev/scope"
"""The namespaces the process watches (sorted, comma-separated; `*` for all): replicas split
new Tasks only with peers of the same scope."""
RENEWALS_PER_PERIOD = 6
"""A process renews its Lease this many times per lease duration (every 5 s at 30 s)."""
SAFETY_FRACTION = 0.2
"""The holder stops trusting its Lease this fraction of the duration before others may."""
GC_PERIODS = 10
"""A Lease lapsed for this many durations belongs to a process that is gone: deleted."""
HOLDER_LEASE_WAIT_FACTOR = 10
"""`status.lease.durationSeconds` of a Task claimed with a holder Lease, in lease periods:
how long an ordo that does not read process Leases waits before taking it over."""
RETRY_DELAY = 0.2

_INVALID = re.compile(r"[^a-z0-9.-]+")


def identity_name(hostname: str, suffix: str) -> str:
    """A process identity that is also a valid Lease name (a DNS-1123 subdomain)."""
    base = _INVALID.sub("-", hostname.lower()).strip("-.")[:200] or "ordo"
    return f"{base}-{suffix}"


def scope_of(namespaces: list[str] | None) -> str:
    return ",".join(sorted(namespaces)) if namespaces else "*"


def expiry(lease: dict[str, Any]) -> datetime | None:
    """When a Lease lapses (spec.renewTime + leaseDurationSeconds), or None without both."""
    spec = lease.get("spec") or {}
    renewed = timestamps.parse(spec.get("renewTime"))
    duration = spec.get("leaseDurationSeconds")
    if renewed is None or not isinstance(duration, int) or isinstance(duration, bool):
        return None
    return renewed + timedelta(seconds=duration)


def task_lease_left(
    task: dict[str, Any],
    now: datetime,
    holder_expiry: Callable[[str], datetime | None] | None,
    *,
    unseen_grace: float,
) -> float:
    """Seconds until the execution lease of `task` lapses as of `now`, seen by a process
    other than its holder (0: none, released, or lapsed). The one liveness rule:

    - no lease, no renewTime, or durationSeconds 0 (released): 0;
    - with `holderLease` and a `holder_expiry` that knows it: until that Lease lapses; one it
      does not know (not seen yet, or deleted) counts from the claim's renewTime for
      `unseen_grace` seconds; `holder_expiry` raising `LookupError` (the peer table cannot be
      trusted now: its watch is broken) counts as alive for `unseen_grace` more;
    - otherwise (a Job pod, an ordo before process Leases, no peer table): renewTime +
      durationSeconds."""
    lease = (task.get("status") or {}).get("lease")
    if not isinstance(lease, dict):
        return 0.0
    renewed = timestamps.parse(lease.get("renewTime"))
    try:
        duration = float(lease.get("durationSeconds") or 0)
    except (TypeError, ValueError):
        return 0.0
    if renewed is None or duration <= 0:
        return 0.0
    ref = lease.get("holderLease")
    if isinstance(ref, str) and ref and holder_expiry is not None:
        try:
            expires = holder_expiry(ref)
        except LookupError:
            return unseen_grace
        if expires is None:
            expires = renewed + timedelta(seconds=unseen_grace)
        return max(0.0, (expires - now).total_seconds())
    return max(0.0, (renewed + timedelta(seconds=duration) - now).total_seconds())


class ProcessLease:
    """This process's Lease `<namespace>/<identity>`. `run()` renews it until cancelled;
    `valid_for()` says how long it may still be trusted by this process's clock."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        identity: str,
        duration: float,
        scope: str,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.identity = identity
        self.duration = max(1, round(duration))
        self.scope = scope
        self.margin = self.duration * SAFETY_FRACTION
        self._clock = clock
        self._renewed_at: float | None = None
        self.renewals = 0
        self.failures = 0

    @property
    def ref(self) -> str:
        """What a Task's `status.lease.holderLease` names."""
        return f"{self.namespace}/{self.identity}"

    @property
    def period(self) -> float:
        return self.duration / RENEWALS_PER_PERIOD

    def valid_for(self) -> float:
        """Seconds this process may still trust its Lease (0 before the first write landed,
        or once renewals failed for longer than the duration minus the margin)."""
        if self._renewed_at is None:
            return 0.0
        return max(0.0, self._renewed_at + self.duration - self.margin - self._clock())

    def _spec(self) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.duration,
            "renewTime": timestamps.format_micros(time.time()),
        }

    async def start(self) -> None:
        """Create (or take back, after a restart under the same name) the Lease. Raises
        `ApiError` when the API refuses it (RBAC: docs/operations.md)."""
        sent = self._clock()
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.identity,
                "labels": {LABEL: "true"},
                "annotations": {SCOPE_ANNOTATION: self.scope},
            },
            "spec": {**self._spec(), "acquireTime": timestamps.format_micros(time.time())},
        }
        try:
            await self.client.create("Lease", self.namespace, body)
        except ApiError as exc:
            if exc.status != 409:
                raise
            await self.client.patch("Lease", self.namespace, self.identity, {"spec": self._spec()})
        self._renewed_at = sent
        log.info(
            "process lease created",
            extra={"ordo": {"lease": self.ref, "durationSeconds": self.duration}},
        )

    async def renew(self) -> None:
        """One renewal (an unconditional merge patch of renewTime: only this process writes
        its Lease). A Lease deleted meanwhile (a peer took it for garbage while this process
        was paused for GC_PERIODS) is created again. Raises `ApiError`."""
        sent = self._clock()
        try:
            await self.client.patch("Lease", self.namespace, self.identity, {"spec": self._spec()})
        except ApiError as exc:
            if not exc.not_found:
                raise
            await self.start()
            return
        self._renewed_at = sent
        self.renewals += 1

    async def run(self) -> None:
        """Renew every period until cancelled; a failed renewal is retried with a short
        backoff (the runs stop by themselves once `valid_for()` reaches 0)."""
        streak = 0
        while True:
            await asyncio.sleep(
                min(RETRY_DELAY * 2 ** (streak - 1), self.period) if streak else self.period
            )
            try:
                await self.renew()
            except Exception as exc:  # transient or not: keep trying while the process runs
                self.failures += 1
                streak += 1
                if streak == 1:
                    log.warning(
                        "process lease renewal failed; retrying",
                        extra={
                            "ordo": {
                                "error": type(exc).__name__,
                                "status": getattr(exc, "status", None),
                                "validForSeconds": round(self.valid_for(), 1),
                            }
                        },
                    )
                continue
            if streak:
                log.info(
                    "process lease renewed again after failures",
                    extra={"ordo": {"failures": streak}},
                )
            streak = 0

    async def close(self) -> None:
        """Delete the Lease (at shutdown, after every run stopped and released its Task)."""
        self._renewed_at = None
        with contextlib.suppress(ApiError):
            await self.client.delete("Lease", self.namespace, self.identity)


class PeerLeases:
    """The process Leases in `namespace`, kept by a watch. `expires(ref)` for the liveness
    rule, `peers()` for splitting new Tasks; `on_change` is called (never blocking) when a
    Lease appears, changes or goes."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        identity: str,
        scope: str,
        *,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.namespace = namespace
        self.identity = identity
        self.scope = scope
        self.on_change = on_change
        self.client = client
        self.informer = Informer(client, "Lease", namespace, on_event=self.apply, index=False)
        self._leases: dict[str, dict[str, Any]] = {}
        """name -> the process Lease (only those with LABEL)."""
        self._task: asyncio.Task[None] | None = None

    def apply(self, event_type: str | None, body: dict[str, Any]) -> None:
        """One watch event of a Lease (the informer's listener; never blocks)."""
        meta = body.get("metadata") or {}
        name = meta.get("name")
        if not isinstance(name, str):
            return
        if event_type == "DELETED" or (meta.get("labels") or {}).get(LABEL) != "true":
            if self._leases.pop(name, None) is None:
                return
        else:
            self._leases[name] = body
        if self.on_change is not None:
            self.on_change()

    async def start(self) -> None:
        """Start the watch and wait for the first list (a process that cannot read peers'
        Leases must not judge their Tasks)."""
        self._task = asyncio.create_task(self.informer.run(), name="ordo-peer-leases")
        await self.informer.wait_until(lambda: self.informer.synced)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def expires(self, ref: str) -> datetime | None:
        """When the Lease `ref` (`<namespace>/<name>`) lapses; None if it is not known. Raises
        `LookupError` while the watch is broken (the table may be stale: nobody is judged
        lapsed from it). A Lease in another namespace is never known here."""
        namespace, _, name = ref.partition("/")
        if namespace != self.namespace:
            return None
        if not self.informer.synced:
            raise LookupError("the process Leases are not synced")
        body = self._leases.get(name)
        return None if body is None else expiry(body)

    def peers(self, now: datetime | None = None) -> tuple[tuple[str, datetime], ...]:
        """The other live processes of this scope and when each Lease lapses."""
        now = now or datetime.now(UTC)
        found = []
        for body in list(self._leases.values()):
            meta = body.get("metadata") or {}
            name = meta.get("name")
            if (
                name == self.identity
                or (meta.get("annotations") or {}).get(SCOPE_ANNOTATION) != self.scope
            ):
                continue
            expires = expiry(body)
            if expires is not None and expires > now:
                found.append((str(name), expires))
        return tuple(sorted(found))

    async def collect_garbage(self, now: datetime | None = None) -> int:
        """Delete the Leases lapsed for GC_PERIODS of their own duration (their processes are
        gone), each conditional on the resourceVersion read. The number deleted."""
        now = now or datetime.now(UTC)
        deleted = 0
        for body in list(self._leases.values()):
            meta = body.get("metadata") or {}
            expires = expiry(body)
            duration = (body.get("spec") or {}).get("leaseDurationSeconds") or 0
            if expires is None or meta.get("name") == self.identity:
                continue
            if now - expires > timedelta(seconds=GC_PERIODS * max(1, int(duration))):
                with contextlib.suppress(ApiError):
                    await self.client.delete(
                        "Lease",
                        self.namespace,
                        str(meta["name"]),
                        resource_version=str(meta.get("resourceVersion") or "") or None,
                    )
                    deleted += 1
        return deleted


class ProcessLeases:
    """This process's Lease and its peers' (what the scheduler and the claimer hold):
    `start()` creates the Lease and waits for the peers' list; `left(task)` is the liveness
    rule for a Task another process holds."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        identity: str,
        duration: float,
        namespaces: list[str] | None,
    ) -> None:
        scope = scope_of(namespaces)
        self.identity = identity
        self.own = ProcessLease(client, namespace, identity, duration, scope)
        self.peers = PeerLeases(client, namespace, identity, scope)
        self._renewer: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.own.start()
        self._renewer = asyncio.create_task(self.own.run(), name="ordo-process-lease")
        await self.peers.start()

    async def stop(self) -> None:
        """Stop renewing and delete the Lease: call it after the runs released their Tasks."""
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        await self.peers.stop()
        await self.own.close()

    def left(self, task: dict[str, Any], now: datetime | None = None) -> float:
        """Seconds until the lease of `task` (held by another process) lapses."""
        return task_lease_left(
            task, now or datetime.now(UTC), self.peers.expires, unseen_grace=self.own.duration
        )
