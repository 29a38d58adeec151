"""An execution lease per running Task (coordination.k8s.io/v1 Lease `ordo-task-<uid>`, owned
by the Task). The process that runs a Task renews it; another process — a restarted
operator, or a second replica — resumes a `Running` Task only once the lease has expired,
and takes it over with a conditional update, so at most one process executes a Task.

The holder keeps its own clock: the lease is valid until the last successful renewal (the
moment that request was sent) plus its duration minus a safety margin (which absorbs clock
skew between nodes and the time a renewal takes). The renewer survives any transient
failure of the API and keeps trying while the lease is valid; it declares the lease lost
only when another holder is seen, the Lease is gone, or the holder's own clock says the
lease expired without a successful renewal. Before every side effect that must not happen
twice, the run calls `check()`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from ..errors import LeaseLost
from .kube import ApiError, KubeClient
from .ownership import owner_reference

PREFIX = "ordo-task-"
SAFETY_FRACTION = 0.2
"""Default safety margin, as a fraction of the lease duration."""
RETRY_DELAY = 0.2
"""First delay before retrying a failed renewal (doubling, at most a renew period)."""

log = logging.getLogger("ordo.operator")


def _micro(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(value: str | None) -> datetime | None:
    if not value:
        return None
    for fmt in ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.strptime(value, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


def remaining(body: dict[str, Any], now: datetime, default_duration: float) -> float:
    """Seconds until the Lease `body` expires at wall-clock time `now` (0 if it has expired or
    never was renewed): renewTime (else acquireTime) + leaseDurationSeconds - now."""
    spec = body.get("spec") or {}
    renewed = _parse(spec.get("renewTime")) or _parse(spec.get("acquireTime"))
    if renewed is None:
        return 0.0
    expires = renewed + timedelta(seconds=float(spec.get("leaseDurationSeconds", default_duration)))
    return max(0.0, (expires - now).total_seconds())


def valid_until(renewed_at: float, duration: float, lease_seconds: int, margin: float) -> float:
    """The holder's own deadline for its lease (same clock as `renewed_at`, the moment the last
    successful renewal was sent): others may take over after the shorter of the duration it
    renews at and the one it wrote, so it stops trusting the lease `margin` seconds earlier."""
    return renewed_at + min(duration, float(lease_seconds)) - margin


class ExecutionLease:
    """The execution lease of one Task, held by `holder` (unique per process)."""

    def __init__(
        self,
        client: KubeClient,
        task: dict[str, Any],
        holder: str,
        duration: float,
        *,
        safety_margin: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._task = task
        meta = task["metadata"]
        self.namespace = meta["namespace"]
        self.name = PREFIX + meta["uid"]
        self.holder = holder
        self.duration = duration
        self.lease_seconds = max(1, round(duration))
        self.safety_margin = duration * SAFETY_FRACTION if safety_margin is None else safety_margin
        self._clock = clock
        self._body: dict[str, Any] | None = None
        self._renewed_at: float | None = None
        self._lost = False
        self.renewals = 0
        """Successful renewals (after the acquisition)."""
        self.failures = 0
        """Failed renewal attempts (transient or not), all streaks together."""

    def _spec(self, acquire: str | None = None, transitions: int = 0) -> dict[str, Any]:
        now = _micro(datetime.now(UTC))
        return {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.lease_seconds,
            "renewTime": now,
            "acquireTime": acquire or now,
            "leaseTransitions": transitions,
        }

    # -- the holder's view -------------------------------------------------------------------

    def expires_in(self) -> float:
        """Seconds this holder may still trust its lease (0 when lost, released or expired)."""
        if self._lost or self._body is None or self._renewed_at is None:
            return 0.0
        deadline = valid_until(
            self._renewed_at, self.duration, self.lease_seconds, self.safety_margin
        )
        return max(0.0, deadline - self._clock())

    def valid(self) -> bool:
        """True while this process holds a live lease by its own clock."""
        return self.expires_in() > 0

    def check(self) -> None:
        """Raise `LeaseLost` unless this process still holds a live lease. Call it right before
        a side effect that must not happen twice (a non-idempotent tool call)."""
        if not self.valid():
            raise LeaseLost("the execution lease of this Task is lost or expired; not continuing")

    # -- other processes' view ---------------------------------------------------------------

    async def held_elsewhere(self) -> float:
        """Seconds until another holder's live lease expires (0 when free, expired or ours)."""
        body = await self._client.get("Lease", self.namespace, self.name)
        if body is None or (body.get("spec") or {}).get("holderIdentity") == self.holder:
            return 0.0
        return remaining(body, datetime.now(UTC), self.duration)

    async def acquire(self) -> bool:
        """Create the lease, or take over an expired (or our own) one. False if someone else
        holds a live lease or wins the race. Raises `ApiError` on other failures (a create or
        takeover that failed transiently may have been applied: acquiring again takes over
        our own lease)."""
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/managed-by": "ordo"},
                "ownerReferences": [owner_reference(self._task)],
            },
            "spec": self._spec(),
        }
        current: dict[str, Any] | None = None
        for _ in range(3):
            sent = self._clock()
            try:
                created = await self._client.create("Lease", self.namespace, body)
            except ApiError as exc:
                if not exc.conflict:
                    raise
            else:
                self._hold(created, sent)
                return True
            current = await self._client.get("Lease", self.namespace, self.name)
            if current is not None:
                break
            # A conflict, yet no Lease: it was deleted in between; create it again.
        if current is None:
            return False
        spec = current.get("spec") or {}
        ours = spec.get("holderIdentity") == self.holder
        if not ours and remaining(current, datetime.now(UTC), self.duration) > 0:
            return False
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        transitions = int(spec.get("leaseTransitions") or 0)
        body["spec"] = self._spec(
            spec.get("acquireTime") if ours else None, transitions if ours else transitions + 1
        )
        sent = self._clock()
        try:
            replaced = await self._client.replace("Lease", self.namespace, self.name, body)
        except ApiError as exc:
            if exc.not_found or exc.conflict:
                return False
            raise
        self._hold(replaced, sent)
        return True

    def _hold(self, body: dict[str, Any], sent: float) -> None:
        self._body = body
        self._renewed_at = sent
        self._lost = False

    async def renew(self) -> bool:
        """One conditional renewal (on the resourceVersion we last wrote). True if renewed;
        False if the lease is lost (another holder is seen, or the Lease is gone). Raises
        `ApiError` on any other failure, which says nothing about who holds the lease."""
        for _ in range(2):
            body = self._body
            if body is None:
                return False
            update = dict(body)
            update["spec"] = dict(
                body.get("spec") or {},
                renewTime=_micro(datetime.now(UTC)),
                holderIdentity=self.holder,
                leaseDurationSeconds=self.lease_seconds,
            )
            sent = self._clock()
            try:
                renewed = await self._client.replace("Lease", self.namespace, self.name, update)
            except ApiError as exc:
                if exc.not_found:
                    return False
                if not exc.conflict:
                    raise
            else:
                self._hold(renewed, sent)
                self.renewals += 1
                return True
            # 409: the Lease changed since our last write. Either another process took it
            # over, or an earlier renewal of ours was applied but its answer was lost.
            current = await self._client.get("Lease", self.namespace, self.name)
            if current is None or (current.get("spec") or {}).get("holderIdentity") != self.holder:
                return False
            self._body = current  # our own write: renew once more on top of it
        return False

    async def renew_until_cancelled(self, on_lost: Callable[[], None]) -> None:
        """Renew every third of the duration until cancelled or released. A failed renewal
        (any error) is retried with a short backoff while the lease is valid by this
        process's clock; `on_lost` is called once, and the renewer stops, only when another
        holder is seen, the Lease is gone, or the lease expired without a renewal."""
        period = self.duration / 3
        delay = period
        streak = 0
        while True:
            await asyncio.sleep(min(delay, max(self.expires_in(), 0.0)) if streak else delay)
            if self._body is None:
                return  # released
            left = self.expires_in()
            if left <= 0:
                self._lose(on_lost, "expired without a successful renewal")
                return
            try:
                async with asyncio.timeout(left):
                    renewed = await self.renew()
            except Exception as exc:  # any failure: retry while the lease is still valid
                self.failures += 1
                streak += 1
                if streak == 1:
                    log.warning(
                        "execution lease renewal failed; retrying while the lease is valid",
                        extra={"ordo": _failure_fields(exc, left)},
                    )
                delay = min(RETRY_DELAY * 2 ** (streak - 1), period)
                continue
            if not renewed:
                self._lose(on_lost, "another holder took it over, or it was deleted")
                return
            if streak:
                log.info(
                    "execution lease renewed again after failures",
                    extra={"ordo": {"failures": streak}},
                )
            streak = 0
            delay = period

    def _lose(self, on_lost: Callable[[], None], why: str) -> None:
        self._lost = True
        log.warning(f"execution lease lost: {why}")
        on_lost()

    async def release(self) -> None:
        """Delete the lease if it is still ours (conditional on its resourceVersion)."""
        body, self._body = self._body, None
        if body is None:
            return
        with contextlib.suppress(ApiError):
            await self._client.delete(
                "Lease",
                self.namespace,
                self.name,
                resource_version=body["metadata"]["resourceVersion"],
            )


def _failure_fields(exc: BaseException, left: float) -> dict[str, Any]:
    """Loggable facts about a failed renewal: status and type names, never a body."""
    fields: dict[str, Any] = {"error": type(exc).__name__, "validForSeconds": round(left, 1)}
    if isinstance(exc, ApiError):
        fields["status"] = exc.status
        fields["apiReason"] = exc.api_reason
        fields["transient"] = exc.transient
    return fields
