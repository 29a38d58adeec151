"""`Ready` conditions of the configuration kinds, evaluated on every watch event that changes
an object (its generation or labels, or it appears or goes) and again on every resync; the
status is patched only when it changes.

What each kind's verdict checks, and the probes, are in verdicts.py; this module keeps the
reconciler (which objects to re-evaluate, and the status patch) and re-exports the verdicts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from pydantic import ValidationError

from ...errors import StoreError, validation_problem
from ...runtime.store import ObjectStore
from ..kube.cache import ObjectCache
from ..kube.client import ApiError, KubeClient
from ..kube.store import KubeStore
from ..tasks.conditions import same_conditions, set_condition
from .guardrails import guardrail_verdict
from .suspension import with_suspension
from .teams import team_verdict
from .verdicts import (
    DEFAULT_PORTS,
    EVALUATORS,
    MCP_TIMEOUT,
    NAMED,
    PROBE_TIMEOUT,
    Evaluator,
    Verdict,
    agent_verdict,
    endpoint_verdict,
    memory_verdict,
    permission_verdict,
    policy_verdict,
    role_verdict,
    tcp_probe,
    tool_verdict,
)
from .webhooks import webhook_verdict

__all__ = [
    "DEFAULT_PORTS",
    "DEPENDENTS",
    "EVALUATORS",
    "MCP_TIMEOUT",
    "NAMED",
    "PROBE_TIMEOUT",
    "RESYNC_CONCURRENCY",
    "Evaluator",
    "ReadinessReconciler",
    "Verdict",
    "agent_verdict",
    "endpoint_verdict",
    "memory_verdict",
    "permission_verdict",
    "policy_verdict",
    "role_verdict",
    "tcp_probe",
    "tool_verdict",
]

log = logging.getLogger("ordo.readiness")

RESYNC_CONCURRENCY = 4
"""Objects evaluated at once on a resync (probes run in parallel, bounded)."""
SYNC_WAIT_SECONDS = 30.0
"""How long an evaluation waits for the operator's cache to sync (at startup) before it
reports what it can read (`Unknown`, `CannotRead`, when the cache stays unreadable)."""

DEPENDENTS: dict[str, tuple[str, ...]] = {
    "Agent": ("AgentRole", "AgentPolicy"),
    "ModelEndpoint": ("Agent",),
    "Tool": ("Agent", "ToolPermission", "AgentPolicy"),
    "Memory": ("Agent",),
    "AgentRole": ("Agent",),
    "ToolPermission": (),
    "AgentPolicy": (),
}
"""Whose `Ready` may change when an object of this kind appears, changes or goes (same
namespace)."""


# AgentPolicy suspend (issue 16 §1, H5): a suspended Agent is not Ready and names the policy
# (suspension.py); a policy change re-evaluates the Agents of its namespace.
EVALUATORS["Agent"] = with_suspension(EVALUATORS["Agent"])
DEPENDENTS["AgentPolicy"] = (*DEPENDENTS["AgentPolicy"], "Agent")

# Guardrail (issue 16 §2): its verdict is in guardrails.py; an Agent's verdict checks
# that its guardrails exist, a model Guardrail's that its ModelEndpoint does.
EVALUATORS["Guardrail"] = guardrail_verdict
DEPENDENTS["Guardrail"] = ("Agent",)
DEPENDENTS["ModelEndpoint"] = (*DEPENDENTS["ModelEndpoint"], "Guardrail")

# Team (issue 27): Ready when the Agents of its members and aggregator exist (teams.py).
EVALUATORS["Team"] = team_verdict
DEPENDENTS["Team"] = ()
DEPENDENTS["Agent"] = (*DEPENDENTS["Agent"], "Team")

# TaskWebhook (issue 29): Ready when its Secret key is usable and its template's Agent or Team
# exists (webhooks.py).
EVALUATORS["TaskWebhook"] = webhook_verdict
DEPENDENTS["TaskWebhook"] = ()
DEPENDENTS["Agent"] = (*DEPENDENTS["Agent"], "TaskWebhook")
DEPENDENTS["Team"] = (*DEPENDENTS["Team"], "TaskWebhook")


def _fingerprint(body: dict[str, Any]) -> tuple[Any, ...]:
    """What a readiness verdict can depend on in the object itself: its generation (the spec)
    and its labels (policy selection). A status-only write keeps it."""
    meta = body.get("metadata") or {}
    return meta.get("generation"), tuple(sorted((meta.get("labels") or {}).items()))


class ReadinessReconciler:
    """Keeps `Ready` (and the counts) current for the configuration kinds it has seen."""

    def __init__(
        self,
        client: KubeClient,
        store: ObjectStore | None = None,
        cache: ObjectCache | None = None,
    ) -> None:
        """Verdicts read through `store` (default: the API); with the operator's `cache`
        (behind `store`) an evaluation first waits, bounded, for it to sync."""
        self.client = client
        self.store = store or KubeStore(client)
        self.cache = cache
        self.seen: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._locks: dict[tuple[str, str, str], asyncio.Lock] = {}

    async def observe(self, kind: str, body: dict[str, Any], event_type: str | None) -> None:
        meta = body.get("metadata") or {}
        key = (kind, meta.get("namespace", "default"), meta.get("name", ""))
        if self.cache is not None:
            # kopf's watch may report a change before the cache's own watch applied it: the
            # verdicts (this object's and its dependents') read the cache.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self.cache.wait_caught_up(kind, key[1], str(meta.get("resourceVersion", ""))),
                    SYNC_WAIT_SECONDS,
                )
        if event_type == "DELETED":
            self.seen.pop(key, None)
            self._locks.pop(key, None)
        elif kind in EVALUATORS:
            previous = self.seen.get(key)
            self.seen[key] = body
            if previous is not None and _fingerprint(previous) == _fingerprint(body):
                return  # a status write (ours): nothing a verdict depends on changed
            await self.evaluate(kind, body)
        dependents = DEPENDENTS.get(kind, ())
        for (k, ns, _), other in list(self.seen.items()):
            if k in dependents and ns == key[1]:
                await self.evaluate(k, other)

    async def resync(self) -> None:
        limit = asyncio.Semaphore(RESYNC_CONCURRENCY)

        async def one(kind: str, body: dict[str, Any]) -> None:
            async with limit:
                try:
                    await self.evaluate(kind, body)
                except Exception:
                    log.exception("readiness evaluation failed", extra={"ordo": {"kind": kind}})

        await asyncio.gather(*(one(kind, body) for (kind, _, _), body in list(self.seen.items())))

    async def evaluate(self, kind: str, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        key = (kind, meta["namespace"], meta["name"])
        async with self._locks.setdefault(key, asyncio.Lock()):
            if self.cache is not None and not self.cache.synced(key[1]):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.cache.wait_synced(key[1]), SYNC_WAIT_SECONDS)
            try:
                verdict = await EVALUATORS[kind](body, self.store)
            except ValidationError as exc:
                verdict = Verdict("False", "InvalidSpec", f"invalid at {validation_problem(exc)}")
            except StoreError as exc:
                verdict = Verdict("Unknown", "CannotRead", str(exc))
            # A GET, not the cache: kopf's watch may deliver this event before the cache's
            # watch does, and the Ready condition must carry the generation it judged.
            fresh = await self.client.get(kind, meta["namespace"], meta["name"])
            if fresh is None:
                return
            status = fresh.get("status") or {}
            generation = fresh["metadata"].get("generation")
            conditions = set_condition(
                status.get("conditions"),
                "Ready",
                verdict.status,
                verdict.reason,
                verdict.message,
                generation=generation,
            )
            if (
                same_conditions(conditions, status.get("conditions"))
                and status.get("observedGeneration") == generation
                and all(status.get(k) == v for k, v in verdict.fields.items())
            ):
                return
            patch = {"conditions": conditions, "observedGeneration": generation, **verdict.fields}
            try:
                await self.client.patch(
                    kind, meta["namespace"], meta["name"], {"status": patch}, status=True
                )
            except ApiError as exc:
                if not exc.not_found:
                    log.warning(
                        "could not write Ready",
                        extra={"ordo": {"kind": kind, "status": exc.status}},
                    )
