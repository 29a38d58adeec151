"""Writes what a run shows to people: the per-step progress and terminal status of a Task
(built from the `api` models by taskstatus.py, the one writer of Task status), its Events,
metrics and log lines, and the release of ordo's finalizer. Writes of an execution are
fenced by its executionId, so a stale executor can never overwrite what a newer one wrote.

Every status write is within `status.MAX_STATUS_BYTES`; a terminal write the API server still
refuses for its size (a Task whose spec leaves little room) is written again reduced, so a
Task never stays `Running` because its result was big. An outcome that knows no run state
(the run failed before its checkpoint was read) keeps the step and usage the Task shows."""

from __future__ import annotations

import logging
import time
from typing import Any

from ...engine import guardsteps
from ...engine.events import (
    Event,
    GuardrailFired,
    ModelResponded,
    RunFinished,
    RunStarted,
    StepFinished,
    StepStarted,
    ToolDecided,
    ToolFinished,
)
from ...engine.state import RunState, ToolCallRecord
from ...runtime import Snapshot, TaskOutcome
from ...runtime import status as status_mod
from ...runtime.team import TEAM_CHAIN_PREFIX
from ..kube.client import ApiError, KubeClient
from ..telemetry import logs
from ..telemetry.metrics import Metrics
from . import childwait, taskstatus
from .recorder import EventRecorder

FINALIZER = "ordo.dev/run"
log = logging.getLogger("ordo.operator")


UNKNOWN_AGENT = "(unknown)"
"""The `agent` label of a Task whose agentRef names no Agent: the label only takes names of
Agents that exist, so a stream of Tasks with made-up agentRefs cannot grow the series."""


def agent_label(agent_ref: str, outcome: TaskOutcome, team_ref: str = "") -> str:
    """The metric label of a finished Task's agent: `team/<name>` for a Team Task whose Team
    was read (its run, runtime/team.py, has a result only then)."""
    if outcome.snapshot is not None:
        return outcome.snapshot.agent.name
    if team_ref:
        return TEAM_CHAIN_PREFIX + team_ref if outcome.result is not None else UNKNOWN_AGENT
    if outcome.reason in _AGENT_WAS_READ and agent_ref:
        return agent_ref
    return UNKNOWN_AGENT  # the Agent was never read: its name is not known to exist


_AGENT_WAS_READ = frozenset(
    {
        "ModelEndpointNotFound",
        "ToolNotFound",
        "SecretNotFound",
        "CredentialNotAllowed",
        "MemoryNotFound",
        "PolicyUnavailable",
        "ModelNotAllowed",
        "AgentSuspended",
        "GuardrailMissing",
    }
)
"""Reasons a run ends with before its snapshot exists but after its Agent was read (the
Agent is resolved first): the agentRef names an existing Agent."""


def refused_for_size(error: ApiError) -> bool:
    """True if the API server refused a write for its size. kube-apiserver (v1.36) answers a
    body over 3 MiB `413 RequestEntityTooLarge`, an object over etcd's request limit (1.5 MiB)
    `500 etcdserver: request is too large`, and one over 2 MiB `500 ... ResourceExhausted ...
    trying to send message larger than max` (tests/cluster/test_big_status_cluster.py)."""
    if error.status == 413:
        return True
    text = str(error)
    return error.status == 500 and ("request is too large" in text or "ResourceExhausted" in text)


class TaskWriter:
    """The status, Events and metrics of Tasks, for one operator process."""

    def __init__(self, client: KubeClient, metrics: Metrics) -> None:
        self.client = client
        self.metrics = metrics
        self.recorder = EventRecorder(client)

    async def finish(
        self,
        body: dict[str, Any],
        outcome: TaskOutcome,
        *,
        execution_id: str | None = None,
        started: float | None = None,
    ) -> None:
        """Write the terminal status (fenced by `execution_id` when the Task was claimed),
        post the Event, count it, cancel its children that still run (childwait.py), release
        the finalizer."""
        meta = body["metadata"]
        ns, name = meta["namespace"], meta["name"]
        status = outcome.status()
        fields = taskstatus.terminal(body, outcome, status)
        try:
            try:
                updated = await self._write(ns, name, execution_id, fields)
            except ApiError as exc:
                if not refused_for_size(exc):
                    raise
                log.warning(
                    "terminal status refused for its size; writing it reduced",
                    extra={"ordo": {"errorStatus": exc.status, "errorReason": exc.api_reason}},
                )
                fields = taskstatus.reduced_terminal(body, outcome, fields)
                updated = await self._write(ns, name, execution_id, fields)
        except ApiError as exc:
            if exc.not_found:
                return
            raise
        spec = body.get("spec") or {}
        agent, team = spec.get("agentRef", ""), spec.get("teamRef", "")
        await self.recorder.post(
            body,
            outcome.phase,
            f"{outcome.reason}: {status.message or ''}",
            warning=outcome.phase == "Failed",
        )
        label = agent_label(agent, outcome, team)
        self.metrics.tasks.labels(ns, label, outcome.phase, outcome.reason).inc()
        if started is not None:
            self.metrics.task_duration.labels(ns, label).observe(time.monotonic() - started)
        step = fields.get("step", (body.get("status") or {}).get("step", 0))
        self.metrics.task_steps.labels(ns, label).observe(step)
        log.info(
            "task finished",
            extra={"ordo": {"phase": outcome.phase, "reason": outcome.reason, "step": step}},
        )
        if childwait.has_children(body, fields):
            await childwait.cascade(self.client, updated)
        await self.release(ns, name, updated)

    async def _write(
        self, namespace: str, name: str, execution_id: str | None, fields: dict[str, Any]
    ) -> dict[str, Any]:
        """Patch the status fields, fenced by `execution_id` when the Task was claimed."""
        if execution_id is not None:
            return await taskstatus.fenced(self.client, namespace, name, execution_id, fields)
        return await taskstatus.merge(self.client, namespace, name, fields)

    async def release(self, namespace: str, name: str, known: dict[str, Any] | None = None) -> None:
        """Remove ordo's finalizer (conditional on resourceVersion, retried on conflict).
        `known` is the object as the last write returned it, which saves a read."""
        for _ in range(5):
            body = known or await self.client.get("Task", namespace, name)
            known = None
            if body is None:
                return
            finalizers = body["metadata"].get("finalizers") or []
            if FINALIZER not in finalizers:
                return
            try:
                await self.client.patch(
                    "Task",
                    namespace,
                    name,
                    {
                        "metadata": {
                            "resourceVersion": body["metadata"]["resourceVersion"],
                            "finalizers": [f for f in finalizers if f != FINALIZER],
                        }
                    },
                )
                return
            except ApiError as exc:
                if exc.not_found:
                    return
                if not exc.conflict:
                    raise


def failed_calls(event: StepFinished) -> list[ToolCallRecord]:
    """The calls of the step just finished that ran and failed (they carry a cause)."""
    step = event.state.step
    return [r for r in event.state.records if r.step == step and r.error]


class ProgressWriter:
    """A run listener that posts a Warning Event for each denied tool call and each failed
    one (`ToolFailed`: tool, step and the sanitised cause); `write` patches the bounded
    progress summary, when the coalesced run writes (coalesce.py) flush a step."""

    def __init__(
        self, writer: TaskWriter, body: dict[str, Any], snapshot: Snapshot, execution_id: str
    ) -> None:
        self._w = writer
        self._body = body
        self._snapshot = snapshot
        self._execution_id = execution_id
        meta = body["metadata"]
        self._ns, self._name = meta["namespace"], meta["name"]
        self._first = True
        self._reported: set[tuple[int, str | None, str]] = set()
        self._redactions: set[tuple[str, str, str | None]] = set()

    async def _tool_failures(self, event: StepFinished) -> None:
        for r in failed_calls(event):
            key = (r.step, r.call_id, r.tool)
            if key in self._reported:
                continue
            self._reported.add(key)
            await self._w.recorder.post(
                self._body,
                "ToolFailed",
                status_mod.cap(
                    f"tool {status_mod.capped_name(r.tool)} failed at step {r.step}: "
                    f"{status_mod.cap(r.error or '', 128)}",
                    1024,
                ),
                warning=True,
            )

    async def _guardrail_fired(self, event: GuardrailFired) -> None:
        """Warning `GuardrailViolation` for each denial; Normal `GuardrailRedacted` once per
        guardrail, point and tool in a run (a redaction may repeat every step)."""
        r = event.record
        if r.action == "redacted":
            if (r.guardrail, r.point, r.tool) in self._redactions:
                return
            self._redactions.add((r.guardrail, r.point, r.tool))
        reason = "GuardrailViolation" if r.action == "denied" else "GuardrailRedacted"
        message = status_mod.cap(guardsteps.fired_message(r), 1024)
        await self._w.recorder.post(self._body, reason, message, warning=r.action == "denied")

    async def write(self, state: RunState) -> None:
        """Patch the bounded progress summary of `state` (fenced by the executionId). Called
        by the coalesced run writes (coalesce.py), at most once per flush window."""
        if self._first:
            patch = taskstatus.progress(
                state, self._snapshot.content_hash, self._snapshot.agent_generation
            )
        else:
            patch = taskstatus.progress(state)
        try:
            await taskstatus.fenced(self._w.client, self._ns, self._name, self._execution_id, patch)
        except ApiError as exc:
            # Progress is best effort (the terminal write carries it all); a Fenced write
            # is not an ApiError and stops the run.
            log.warning(
                "progress write failed",
                extra={"ordo": {"errorStatus": exc.status, "errorReason": exc.api_reason}},
            )
            return
        self._first = False

    async def __call__(self, event: Event) -> None:
        if isinstance(event, StepFinished):
            await self._tool_failures(event)
        elif isinstance(event, GuardrailFired):
            await self._guardrail_fired(event)
        elif isinstance(event, ToolDecided) and event.record.decision == "denied":
            r = event.record
            await self._w.recorder.post(
                self._body,
                "ToolDenied",
                status_mod.cap(
                    f"tool {status_mod.capped_name(r.tool)} denied at step {r.step}: {r.reason}",
                    1024,
                ),
                warning=True,
            )


async def log_events(event: Event) -> None:
    """Structured log lines for engine events: names, counts and decisions only. The start
    and end of a run, denials, guardrails and failures at info or above; the per-call lines
    (each model call and answer, each allowed tool call and its end) at debug: at thousands
    of Tasks they were most of the log volume and a measurable share of the operator's CPU,
    and the Task's status, Events, metrics and traces carry the same facts."""
    if isinstance(event, RunStarted):
        log.info("run started", extra={"ordo": {"resumedFromStep": event.resumed_from_step}})
    elif isinstance(event, StepStarted):
        logs.bind(step=event.step)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("model call", extra={"ordo": {"step": event.step}})
    elif isinstance(event, ModelResponded):
        if not log.isEnabledFor(logging.DEBUG):
            return
        log.debug(
            "model responded",
            extra={
                "ordo": {
                    "toolCalls": event.tool_calls,
                    "inputTokens": event.usage.input_tokens,
                    "outputTokens": event.usage.output_tokens,
                }
            },
        )
    elif isinstance(event, ToolDecided):
        r = event.record
        level = logging.WARNING if r.decision == "denied" else logging.DEBUG
        if not log.isEnabledFor(level):
            return
        log.log(
            level,
            "tool decision",
            extra={
                "ordo": {
                    "tool": status_mod.capped_name(r.tool),
                    "decision": r.decision,
                    "reason": status_mod.cap(r.reason, 256),
                }
            },
        )
    elif isinstance(event, GuardrailFired):
        g = event.record
        log.log(
            logging.WARNING if g.action == "denied" else logging.INFO,
            "guardrail fired",
            extra={
                "ordo": {
                    "guardrail": g.guardrail,
                    "point": g.point,
                    "action": g.action,
                    **({"tool": status_mod.capped_name(g.tool)} if g.tool else {}),
                    **({"cause": g.cause} if g.cause else {}),
                }
            },
        )
    elif isinstance(event, ToolFinished):
        if not log.isEnabledFor(logging.DEBUG):
            return
        log.debug(
            "tool finished",
            extra={"ordo": {"tool": status_mod.capped_name(event.tool), "outcome": event.outcome}},
        )
    elif isinstance(event, StepFinished):
        for r in failed_calls(event):
            log.warning(
                "tool failed",
                extra={
                    "ordo": {
                        "tool": status_mod.capped_name(r.tool),
                        "step": r.step,
                        "cause": status_mod.cap(r.error or "", 128),
                    }
                },
            )
    elif isinstance(event, RunFinished):
        log.info(
            "run finished",
            extra={"ordo": {"phase": event.result.phase, "reason": event.result.reason}},
        )
