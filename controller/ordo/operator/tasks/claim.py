"""Claiming a Task for one execution: wait for another holder's lease, refuse a duplicate
idempotencyKey, add the finalizer, and write the claim, which takes the execution lease in
the same status write (`status.lease`, lease.py). Every write is conditional
(resourceVersion), so of two racing processes one claims and one backs off; a claim whose
response was lost (a transport error after the write reached the server) is recognised by
its executionId instead of being taken for someone else's.

The outcomes are values: `reserve` returns the Task to go on with, `Lost` or `NotSettled`;
`claim` returns `Claimed`, `Lost`, `Held` or `NotSettled`. `NotSettled` (repeated conflicts or
transient failures) is not a verdict on the Task: the job tries again with backoff, counted
against its bound like a transient API failure."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ...api import TERMINAL_PHASES
from ...api.agent import ExecutionMode
from ..kube.client import ApiError, KubeClient
from ..telemetry.metrics import Metrics
from . import taskstatus
from .lease import ExecutionLease, held_elsewhere, lease_of
from .processlease import ProcessLeases
from .writer import FINALIZER

CLAIM_ATTEMPTS = 5
log = logging.getLogger("ordo.operator")


@dataclass(frozen=True, slots=True)
class Lost:
    """Another process reserved, claimed or ended the Task first (or it is gone)."""


@dataclass(frozen=True, slots=True)
class Held:
    """Another process holds a live execution lease on the Task."""


@dataclass(frozen=True, slots=True)
class NotSettled:
    """The write did not settle after CLAIM_ATTEMPTS conflicts or transient failures, or this
    process's Lease is not valid now (it claims nothing it could not keep)."""

    what: str
    """"reservation", "claim" or "process lease"."""


@dataclass(frozen=True)
class Claim:
    body: dict[str, Any]
    """The Task as the claim write returned it."""
    execution_id: str
    lease: ExecutionLease
    resuming: bool


@dataclass(frozen=True, slots=True)
class Claimed:
    claim: Claim


Reserved = dict[str, Any] | Lost | NotSettled
"""What `reserve` returns: the Task to go on with, or why not."""
ClaimResult = Claimed | Lost | Held | NotSettled


class Claimer:
    def __init__(
        self,
        client: KubeClient,
        identity: str,
        lease_seconds: float,
        metrics: Metrics | None = None,
        leases: ProcessLeases | None = None,
    ) -> None:
        self.client = client
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.leases = leases
        """This process's Lease and its peers' (processlease.py); None: per-Task leases."""
        self.metrics = metrics
        """Counts claim outcomes (`ordo_task_claims_total`): what replicas lose to each other."""

    def _outcome(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.claims.labels(outcome).inc()

    def lease(self, body: dict[str, Any], execution_id: str) -> ExecutionLease:
        own = self.leases.own if self.leases is not None else None
        return ExecutionLease(
            self.client,
            body,
            self.identity,
            self.lease_seconds,
            execution_id,
            liveness=own.valid_for if own is not None else None,
            holder_lease=own.ref if own is not None else None,
        )

    def held_elsewhere(self, body: dict[str, Any]) -> float:
        """Seconds until another process's live lease on the Task lapses (0: free or ours)."""
        return held_elsewhere(
            body, self.identity, left=self.leases.left if self.leases is not None else None
        )

    def _landed(self, lease: ExecutionLease, body: dict[str, Any]) -> None:
        """The claim landed as `body`: without the holderLease it wrote, the Task CRD predates
        the field (pruned), so this run renews the Task's own lease instead."""
        if (
            lease.holder_lease is not None
            and lease_of(body).get("holderLease") != lease.holder_lease
        ):
            log.warning(
                "the Task CRD drops status.lease.holderLease (it predates ordo's process "
                "Leases): renewing this Task's lease itself; upgrade the CRDs (docs/operations.md)"
            )
            lease.per_task()

    async def wait_for_other_holder(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Task, once no other process holds it: a `Running` Task may be executing
        elsewhere, so wait until its execution lease expires. None if it is gone or ended."""
        while True:
            body = await self.client.get("Task", namespace, name)
            if body is None:
                return None
            phase = (body.get("status") or {}).get("phase")
            if phase != "Running":
                return None if phase in TERMINAL_PHASES else body
            remaining = self.held_elsewhere(body)
            if remaining <= 0:
                return body
            log.info(
                "task is held by another execution; waiting for its lease",
                extra={"ordo": {"seconds": round(remaining, 1)}},
            )
            await asyncio.sleep(remaining + 0.2)

    async def reserve(
        self,
        body: dict[str, Any],
        fresher: Callable[[], Awaitable[dict[str, Any] | None]],
    ) -> Reserved:
        """Add ordo's finalizer to a Pending Task before anything else is done for it,
        conditional on its resourceVersion: of several processes that see a new Task, the one
        whose write lands goes on, and the others stop after one refused request instead of
        checking references and racing for the claim. Returns the Task to go on with, or None
        `Lost` when another process reserved it first (or it is gone or no longer Pending).

        A reservation is not a claim: a Task that already has the finalizer is taken as it is
        (the scheduler looks at one reserved elsewhere only once its events stopped for a
        lease period), and the claim write still decides who runs it. `fresher` returns the
        Task as it is now (its next watch event, or a read)."""
        for _ in range(CLAIM_ATTEMPTS):
            meta = body["metadata"]
            if FINALIZER in (meta.get("finalizers") or []):
                return body
            try:
                return await self._add_finalizer(meta)
            except ApiError as exc:
                if exc.not_found:
                    return Lost()
                if not (exc.conflict or exc.transient):
                    raise
            fresh = await fresher()
            if fresh is None:
                return Lost()
            phase = (fresh.get("status") or {}).get("phase")
            if phase not in (None, "Pending") or FINALIZER in (
                fresh["metadata"].get("finalizers") or []
            ):
                log.info("another process reserved, claimed or ended the Task first")
                self._outcome("lost")
                return Lost()
            body = fresh
        return NotSettled("reservation")

    async def _add_finalizer(self, meta: dict[str, Any]) -> dict[str, Any]:
        """Add ordo's finalizer, conditional on the resourceVersion of `meta`."""
        return await self.client.patch(
            "Task",
            meta["namespace"],
            meta["name"],
            {
                "metadata": {
                    "resourceVersion": meta["resourceVersion"],
                    "finalizers": [*(meta.get("finalizers") or []), FINALIZER],
                }
            },
        )

    async def duplicate_of(self, body: dict[str, Any]) -> str | None:
        """The name of an earlier Task with the same idempotencyKey, if any. A Task that was
        claimed wins over one that was not; otherwise the older (then by name) wins."""
        key = body["spec"]["idempotencyKey"]
        me = body["metadata"]
        mine = (me.get("creationTimestamp", ""), me["name"])
        for other in await self.client.list("Task", me["namespace"]):
            ometa = other["metadata"]
            if ometa["uid"] == me["uid"] or (other.get("spec") or {}).get("idempotencyKey") != key:
                continue
            ostatus = other.get("status") or {}
            if ostatus.get("reason") == "DuplicateExecution":
                continue
            if (
                ostatus.get("executionId")
                or (ometa.get("creationTimestamp", ""), ometa["name"]) < mine
            ):
                return str(ometa["name"])
        return None

    async def claim(
        self, body: dict[str, Any], resuming: bool, mode: ExecutionMode | None = None
    ) -> ClaimResult:
        """Add the finalizer and write the claim, which takes the execution lease (and writes
        `status.executionMode` = `mode`, when given): one status write. `Lost` if another
        process claimed or ended the Task meanwhile, `Held` if one holds a live lease on it."""
        meta = body["metadata"]
        ns, name = meta["namespace"], meta["name"]
        execution_id = uuid.uuid4().hex[:12]
        lease = self.lease(body, execution_id)
        sent: float | None = None
        for _ in range(CLAIM_ATTEMPTS):
            try:
                if FINALIZER not in (meta.get("finalizers") or []):
                    body = await self._add_finalizer(meta)
                    meta = body["metadata"]
                status = body.get("status") or {}
                if status.get("phase") in TERMINAL_PHASES or (
                    status.get("phase") == "Running" and not resuming
                ):
                    log.info("another process claimed or ended the Task first")
                    self._outcome("lost")
                    return Lost()
                if self.held_elsewhere(body) > 0:
                    log.info("another process holds the Task's execution lease")
                    self._outcome("held")
                    return Held()
                if self.leases is not None and self.leases.own.valid_for() <= 0:
                    log.warning("this process's Lease is not valid now; not claiming")
                    return NotSettled("process lease")
                fields = taskstatus.claimed(body, execution_id, resuming, mode, lease.fields())
                # The earliest send of a claim write: one that failed may still have landed.
                sent = lease.clock() if sent is None else sent
                body = await taskstatus.merge(
                    self.client, ns, name, fields, resource_version=meta["resourceVersion"]
                )
                lease.held_since(sent)
                self._landed(lease, body)
                self._outcome("claimed")
                return Claimed(Claim(body, execution_id, lease, resuming))
            except ApiError as exc:
                if not (exc.conflict or exc.transient):
                    raise
                # A conflict, or a failure that may hide an applied write: read the Task
                # again; our own executionId there means the claim did land.
                await asyncio.sleep(0.2)
                fresh = await self.client.get("Task", ns, name)
                if fresh is None:
                    return Lost()
                body, meta = fresh, fresh["metadata"]
                if (fresh.get("status") or {}).get("executionId") == execution_id:
                    assert sent is not None  # only the claim write sets it
                    lease.held_since(sent)
                    self._landed(lease, fresh)
                    self._outcome("claimed")
                    return Claimed(Claim(fresh, execution_id, lease, resuming))
                if (fresh.get("status") or {}).get("phase") in TERMINAL_PHASES:
                    log.info("another process claimed or ended the Task first")
                    self._outcome("lost")
                    return Lost()
        log.warning("could not claim the Task after repeated conflicts or API errors")
        # Not a verdict on the Task: the job tries again with backoff (giving up here would
        # leave the Task Pending until some other event arrives).
        return NotSettled("claim")
