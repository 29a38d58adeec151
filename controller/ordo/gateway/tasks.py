"""An A2A task is an ordo Task: its name from the caller and the A2A message id, its body
from the message, and its status read back as an A2A Task (docs/a2a.md#states).

The name is a digest of the caller's user name and the message id, so an identical retried
send finds the Task the first one created, and two callers never collide."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from a2a.types.a2a_pb2 import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
)
from google.protobuf.json_format import MessageToDict

from ..api.task import REQUESTER_ANNOTATION
from ..engine.delegation import CHAIN_ANNOTATION, Lineage
from ..runtime.tracing import TRACEPARENT_ANNOTATION
from .reviews import Caller

AGENT_LABEL = "ordo.dev/a2a-agent"
"""On a Task the gateway created: the Agent it serves (ListTasks selects by it)."""
CONTEXT_ANNOTATION = "ordo.dev/a2a-context-id"
MESSAGE_ANNOTATION = "ordo.dev/a2a-message-id"
CHAIN_METADATA = "ordo.dev/delegation-chain"
"""The A2A message metadata key a delegating caller sets: the Agents above it, as a list."""

GOVERNANCE_REASONS = frozenset(
    {
        "ToolDenied",
        "ModelNotAllowed",
        "CredentialNotAllowed",
        "AgentSuspended",
        "GuardrailViolation",
        "ApprovalRejected",
        "ApprovalTimedOut",
        "DelegationCycle",
        "DelegationDepthExceeded",
    }
)
"""Reasons that mean governance said no: the A2A task is REJECTED, not FAILED."""

_INVALID = re.compile(r"[^a-z0-9-]")


def task_name(agent: str, caller: Caller, message_id: str) -> str:
    """The Task for `caller`'s message `message_id` to `agent` (at most 53 characters)."""
    digest = hashlib.sha256(f"{caller.username}\x00{message_id}".encode()).hexdigest()[:16]
    prefix = _INVALID.sub("-", agent.lower())[:32].strip("-") or "agent"
    return f"a2a-{prefix}-{digest}"


def message_input(message: Message) -> str | dict[str, Any]:
    """The Task's input: the data part if the message has exactly one and no text, else the
    text parts joined."""
    texts = [p.text for p in message.parts if p.WhichOneof("content") == "text"]
    data = [p.data for p in message.parts if p.WhichOneof("content") == "data"]
    if not texts and len(data) == 1:
        value = MessageToDict(data[0])
        if isinstance(value, dict):
            return value
        return json.dumps(value)
    return "\n".join(texts)


def caller_chain(message: Message) -> tuple[str, ...]:
    """The delegation chain a caller sent in the message metadata (empty when none)."""
    if not message.HasField("metadata") or CHAIN_METADATA not in message.metadata.fields:
        return ()
    raw = MessageToDict(message.metadata).get(CHAIN_METADATA)
    if isinstance(raw, list) and all(isinstance(a, str) for a in raw):
        return tuple(raw)
    return ()


def refusal(agent: str, chain: tuple[str, ...], max_depth: int) -> str | None:
    """Why a caller whose chain is `chain` may not start `agent` (a cycle, too deep)."""
    if not chain:
        return None
    found = Lineage(chain[0], chain).refusal(agent, max_depth)
    return f"{found[0]}: {found[1]}" if found else None


def task_body(
    name: str,
    agent: str,
    caller: Caller,
    message: Message,
    chain: tuple[str, ...],
    traceparent: str | None = None,
) -> dict[str, Any]:
    """The Task the gateway creates for `message`; the requester is the authenticated
    caller, set by the gateway (never taken from the request); `traceparent` is the
    gateway's span, under which the run's spans nest."""
    annotations = {
        REQUESTER_ANNOTATION: caller.username,
        MESSAGE_ANNOTATION: message.message_id[:253],
        CONTEXT_ANNOTATION: (message.context_id or name)[:253],
    }
    if chain:
        annotations[CHAIN_ANNOTATION] = json.dumps([*chain, agent])
    if traceparent:
        annotations[TRACEPARENT_ANNOTATION] = traceparent
    return {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": "Task",
        "metadata": {"name": name, "labels": {AGENT_LABEL: agent}, "annotations": annotations},
        "spec": {"agentRef": agent, "input": message_input(message)},
    }


def _condition(status: dict[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True" for c in status.get("conditions") or []
    )


def task_state(obj: dict[str, Any]) -> TaskState:
    """The A2A state of a Task object."""
    status = obj.get("status") or {}
    phase = status.get("phase")
    if phase == "Succeeded":
        return TaskState.TASK_STATE_COMPLETED
    if phase == "Cancelled":
        return TaskState.TASK_STATE_CANCELED
    if phase == "Failed":
        if status.get("reason") in GOVERNANCE_REASONS:
            return TaskState.TASK_STATE_REJECTED
        return TaskState.TASK_STATE_FAILED
    if _condition(status, "AwaitingApproval"):
        return TaskState.TASK_STATE_INPUT_REQUIRED
    if phase == "Running":
        return TaskState.TASK_STATE_WORKING
    return TaskState.TASK_STATE_SUBMITTED


FINAL_STATES = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_REJECTED,
    }
)
"""States after which nothing changes."""
INTERRUPTED_STATES = frozenset({*FINAL_STATES, TaskState.TASK_STATE_INPUT_REQUIRED})
"""States at which a blocking send or a stream returns."""


def context_id(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return str((meta.get("annotations") or {}).get(CONTEXT_ANNOTATION) or meta.get("name"))


def status_of(obj: dict[str, Any]) -> TaskStatus:
    """The A2A status: its state, and a short agent message with the step, or the ordo
    reason and message of a failure (never the answer: that is the artifact)."""
    status = obj.get("status") or {}
    state = task_state(obj)
    if state in (TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_REJECTED):
        text = f"{status.get('reason') or 'Failed'}: {status.get('message') or ''}".strip()
    elif state == TaskState.TASK_STATE_INPUT_REQUIRED:
        text = "waiting for approval of a tool call (a ToolApproval in the Task's namespace)"
    else:
        text = f"step {int(status.get('step') or 0)}"
    name = str((obj.get("metadata") or {}).get("name"))
    note = Message(
        message_id=f"{name}-{state}-{int(status.get('step') or 0)}",
        role=Role.ROLE_AGENT,
        task_id=name,
        context_id=context_id(obj),
        parts=[Part(text=text)],
    )
    return TaskStatus(state=state, message=note)


def answer(obj: dict[str, Any]) -> Artifact | None:
    """The answer of a Succeeded Task as an artifact (its structured output as data)."""
    status = obj.get("status") or {}
    if status.get("phase") != "Succeeded":
        return None
    part = Part(text=str(status.get("output") or ""))
    if isinstance(status.get("structuredOutput"), dict):
        part = Part()
        part.data.struct_value.update(status["structuredOutput"])
    return Artifact(artifact_id="answer", name="answer", parts=[part])


def a2a_task(obj: dict[str, Any]) -> Task:
    """The A2A view of a Task object."""
    name = str((obj.get("metadata") or {}).get("name"))
    task = Task(id=name, context_id=context_id(obj), status=status_of(obj))
    artifact = answer(obj)
    if artifact is not None:
        task.artifacts.append(artifact)
    return task
