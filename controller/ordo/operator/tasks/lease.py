"""The execution lease of a running Task, kept in the Task's own `status.lease` (holder,
renewTime, durationSeconds, and for an operator process holderLease): taking and dropping it
costs no request of its own. Another process — a restarted operator, or a second replica —
resumes a `Running` Task only once the lease has lapsed (or was released: durationSeconds 0),
and takes it over with a write conditional on the resourceVersion it read, so at most one
process executes a Task.

Two ways to keep it alive (`keep`):
- an operator process names its own `coordination.k8s.io` Lease in `holderLease` and renews
  only that (processlease.py): the Task's lease lives as long as the process's, and the run's
  validity is the process Lease's (`liveness`);
- a Job pod, or an operator whose Task CRD predates holderLease, renews `renewTime` of each
  Task it runs, every third of the duration (`per_task`).

Who may write what (each write built and sent by taskstatus.py):
- the claim (claim.py) writes the lease together with the new executionId, conditional on
  the resourceVersion: of two racing claimers one wins;
- a Job pod (jobrunner.py) takes the lease its operator released, under the same
  executionId, conditional on the resourceVersion;
- renewals and the release are JSON Patches that first `test` the executionId and the
  holder: a holder that was taken over writes nothing and learns it lost the lease.

The holder keeps its own clock: the lease is valid until the last successful renewal (the
moment that request was sent) plus its duration minus a safety margin (which absorbs clock
skew between nodes and the time a renewal takes). The renewer survives any transient
failure of the API and keeps trying while the lease is valid; it declares the lease lost
only when another holder or execution is seen, the Task is gone, or the holder's own clock
says the lease expired without a successful renewal. Before every side effect that must not
happen twice, the run calls `check()`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ... import timestamps
from ...errors import LeaseLost
from ..kube.client import ApiError, KubeClient, patch_test_failed
from . import taskstatus
from .processlease import HOLDER_LEASE_WAIT_FACTOR, task_lease_left

SAFETY_FRACTION = 0.2
"""Default safety margin, as a fraction of the lease duration."""
RETRY_DELAY = 0.2
"""First delay before retrying a failed renewal (doubling, at most a renew period)."""
ACQUIRE_ATTEMPTS = 3

log = logging.getLogger("ordo.operator")


def _parse(value: str | None) -> datetime | None:
    """The instant of an RFC 3339 timestamp, else None (ordo/timestamps.py). This runs for
    every watch event of a running Task in every replica: about 1 us."""
    return timestamps.parse(value)


def lease_of(task: dict[str, Any]) -> dict[str, Any]:
    """`status.lease` of a Task (empty when it has none)."""
    lease = (task.get("status") or {}).get("lease")
    return lease if isinstance(lease, dict) else {}


def remaining(task: dict[str, Any], now: datetime) -> float:
    """Seconds until the lease in the Task `task` expires at wall-clock time `now` by its own
    fields: renewTime + durationSeconds - now; 0 if it expired, was released, or there is
    none. (With process Leases, `processlease.task_lease_left` is the rule.)"""
    return task_lease_left(task, now, None, unseen_grace=0.0)


def held_elsewhere(
    task: dict[str, Any],
    holder: str,
    now: datetime | None = None,
    left: Callable[[dict[str, Any]], float] | None = None,
) -> float:
    """Seconds until another holder's live lease on `task` expires (0 when free, expired,
    released, or `holder`'s own); `left` is the liveness rule (default: `remaining` now)."""
    if lease_of(task).get("holder") == holder:
        return 0.0
    if left is not None:
        return left(task)
    return remaining(task, now or datetime.now(UTC))


def valid_until(renewed_at: float, duration: float, lease_seconds: int, margin: float) -> float:
    """The holder's own deadline for its lease (same clock as `renewed_at`, the moment the last
    successful renewal was sent): others may take over after the shorter of the duration it
    renews at and the one it wrote, so it stops trusting the lease `margin` seconds earlier."""
    return renewed_at + min(duration, float(lease_seconds)) - margin


class ExecutionLease:
    """The execution lease of one Task for execution `execution_id`, held by `holder`
    (unique per process). With `liveness` (seconds this process may still trust its process
    Lease) and `holder_lease` (that Lease's `<namespace>/<name>`) the Task's lease is the
    process's and `keep` writes nothing; without, `keep` renews the Task's own."""

    def __init__(
        self,
        client: KubeClient,
        task: dict[str, Any],
        holder: str,
        duration: float,
        execution_id: str,
        *,
        safety_margin: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        liveness: Callable[[], float] | None = None,
        holder_lease: str | None = None,
    ) -> None:
        self._client = client
        meta = task["metadata"]
        self.namespace = meta["namespace"]
        self.task_name = meta["name"]
        self.holder = holder
        self.execution_id = execution_id
        self.duration = duration
        self.lease_seconds = max(1, round(duration))
        self.safety_margin = duration * SAFETY_FRACTION if safety_margin is None else safety_margin
        self._clock = clock
        self._held = False
        self._renewed_at: float | None = None
        self._lost = False
        self._lost_event: asyncio.Event | None = None
        self._lost_why = "declared lost"
        self._liveness = liveness if holder_lease else None
        self.holder_lease = holder_lease if liveness is not None else None
        self.renewals = 0
        """Successful renewals (after the acquisition)."""
        self.failures = 0
        """Failed renewal attempts (transient or not), all streaks together."""

    def fields(self, duration: int | None = None) -> dict[str, Any]:
        """`status.lease` as this holder writes it now (taskstatus.py): with a holder Lease,
        a durationSeconds of HOLDER_LEASE_WAIT_FACTOR periods (what an ordo before process
        Leases waits)."""
        if self.holder_lease is not None:
            wait = self.lease_seconds * HOLDER_LEASE_WAIT_FACTOR
            return taskstatus.lease(
                self.holder, wait if duration is None else duration, self.holder_lease
            )
        return taskstatus.lease(self.holder, self.lease_seconds if duration is None else duration)

    @property
    def per_process(self) -> bool:
        """The Task's lease is this process's Lease (nothing to renew per Task)."""
        return self._liveness is not None

    def per_task(self) -> None:
        """Renew this Task's own lease from now on: the claim came back without holderLease
        (its CRD predates the field and pruned it), so nobody would see the process Lease."""
        self._liveness = None
        self.holder_lease = None

    # -- the holder's view -------------------------------------------------------------------

    def held_since(self, sent: float) -> None:
        """A write carrying `fields()` landed; it was sent at `sent` (this lease's clock)."""
        self._held = True
        self._renewed_at = sent
        self._lost = False

    def clock(self) -> float:
        return self._clock()

    def expires_in(self) -> float:
        """Seconds this holder may still trust its lease (0 when lost, released or expired)."""
        if self._lost or not self._held or self._renewed_at is None:
            return 0.0
        if self._liveness is not None:
            return self._liveness()
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
        """Seconds until another holder's live lease expires (0 when free, expired or ours),
        read from the Task now (0 if the Task is gone)."""
        body = await self._client.get("Task", self.namespace, self.task_name)
        if body is None:
            return 0.0
        return held_elsewhere(body, self.holder)

    async def acquire(self) -> bool:
        """Take the lease of a Task already claimed by this lease's execution (a Job pod
        taking over from its operator), conditional on the resourceVersion read. False if the
        Task is gone or claimed by another execution, or another holder has a live lease.
        Raises `ApiError` on other failures (a write that failed transiently may have been
        applied: acquiring again takes over our own lease)."""
        for _ in range(ACQUIRE_ATTEMPTS):
            body = await self._client.get("Task", self.namespace, self.task_name)
            if body is None or (body.get("status") or {}).get("executionId") != self.execution_id:
                return False
            if held_elsewhere(body, self.holder) > 0:
                return False
            sent = self._clock()
            try:
                await taskstatus.merge(
                    self._client,
                    self.namespace,
                    self.task_name,
                    {"lease": self.fields()},
                    resource_version=body["metadata"]["resourceVersion"],
                )
            except ApiError as exc:
                if exc.not_found:
                    return False
                if exc.conflict:
                    continue  # the Task changed since the read: look again
                raise
            self.held_since(sent)
            return True
        return False

    async def renew(self) -> bool:
        """One renewal, fenced by the executionId and the holder. True if renewed; False if
        the lease is lost (another holder or execution is seen, or the Task is gone). Raises
        `ApiError` on any other failure, which says nothing about who holds the lease."""
        if not self._held:
            return False
        ops = taskstatus.lease_renewal(self.execution_id, self.holder, self.fields())
        sent = self._clock()
        try:
            await taskstatus.apply(self._client, self.namespace, self.task_name, ops)
        except ApiError as exc:
            if exc.not_found or _test_failed(exc):
                return False
            raise
        self.held_since(sent)
        self.renewals += 1
        return True

    async def keep(self, on_lost: Callable[[], None]) -> None:
        """Keep the lease until cancelled or released; `on_lost` is called once, and this
        returns, when it is lost. Per process: wait while the process Lease is valid (it is
        renewed elsewhere), or until `lose`. Per Task: renew it (`_renew_until_lost`)."""
        if self._liveness is None:
            await self._renew_until_lost(on_lost)
            return
        lost = self._lost_event = asyncio.Event()
        while self._held:
            left = self.expires_in()
            if left <= 0:
                if self._liveness is None:  # switched to per Task meanwhile
                    await self._renew_until_lost(on_lost)
                    return
                self._lose(on_lost, "this process's Lease is no longer valid by its own clock")
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await lost.wait()
            if lost.is_set():
                self._lose(on_lost, self._lost_why)
                return

    def lose(self, why: str) -> None:
        """Declare the lease lost (the process that runs the run knows it can no longer keep
        it: a worker lost its control process's heartbeat): `keep` calls its `on_lost`."""
        self._lost_why = why
        self._lost = True
        if self._lost_event is not None:
            self._lost_event.set()

    async def _renew_until_lost(self, on_lost: Callable[[], None]) -> None:
        """Renew every third of the duration until cancelled or released. A failed renewal
        (any error) is retried with a short backoff while the lease is valid by this
        process's clock; `on_lost` is called once, and the renewer stops, only when another
        holder is seen, the Task is gone, or the lease expired without a renewal."""
        period = self.duration / 3
        delay = period
        streak = 0
        while True:
            await asyncio.sleep(min(delay, max(self.expires_in(), 0.0)) if streak else delay)
            if not self._held:
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
                self._lose(on_lost, "another holder or execution took it over, or the Task is gone")
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

    async def release(self, *, write: bool = True) -> None:
        """Stop holding the lease; with `write`, mark it released in the Task (durationSeconds
        0, fenced by the executionId and the holder) so another process need not wait for it
        to expire. Without: the Task has ended, and nobody takes a finished Task over."""
        held, self._held = self._held, False
        if not held or not write:
            return
        ops = taskstatus.lease_release(self.execution_id, self.holder)
        with contextlib.suppress(ApiError):
            await taskstatus.apply(self._client, self.namespace, self.task_name, ops)


def _test_failed(exc: ApiError) -> bool:
    return patch_test_failed(exc, "/status/executionId") or patch_test_failed(
        exc, "/status/lease/holder"
    )


def _failure_fields(exc: BaseException, left: float) -> dict[str, Any]:
    """Loggable facts about a failed renewal: status and type names, never a body."""
    fields: dict[str, Any] = {"error": type(exc).__name__, "validForSeconds": round(left, 1)}
    if isinstance(exc, ApiError):
        fields["status"] = exc.status
        fields["apiReason"] = exc.api_reason
        fields["transient"] = exc.transient
    return fields
