"""The calls a parked Task waits for, published for approvers (issue 26 §5): a ConfigMap
`ordo-approval-<task uid>` the Task owns, holding for each waiting call its id, tool, parsed
arguments and `args_digest(arguments)` — nothing else of the transcript. The chart's
`approver` role may get ConfigMaps; `ordo approvals TASK` reads this object instead of the
checkpoint (which approvers need not, and after checkpoint encryption cannot, read).

Written by the execution that parks the run (the operator, a worker or a Job-mode pod: the
Runner), after its fenced checkpoint write and before its fenced status write; if that status
write is refused (another execution owns the Task) the publication is withdrawn again. It is
annotated with the execution id, and a reader uses it only while the Task's
`status.executionId` names that execution, so a stale executor's publication is never shown.
It is deleted when the run resumes (the calls are decided), with the Task (ownerReference),
and by the retention sweep.

A reader never trusts the digest it finds: `read` recomputes `args_digest` of the published
arguments and marks a call whose digest differs as forged (`ordo approvals` refuses to show
it), so whoever can write ConfigMaps cannot show an approver one set of arguments while the
digest names another. The operator never reads this object back: it binds approvals to the
digest of the arguments in the run's own state.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from ...engine.approvals import call_digest
from ...engine.state import RunState
from ..kube.client import ApiError, KubeClient
from .ownership import owner_reference

PREFIX = "ordo-approval-"
LABEL = "ordo.dev/pending-calls-of"
"""The Task's name (truncated to 63 characters), for `kubectl get cm -l`."""
UID_LABEL = "ordo.dev/pending-calls-uid"
EXECUTION_ANNOTATION = "ordo.dev/execution-id"
KEY = "calls.json"
MAX_BYTES = 900_000
"""Largest publication (a ConfigMap holds at most 1 MiB); calls whose arguments do not fit are
published with their digest and without arguments (`argumentsOmitted`)."""
WRITE_ATTEMPTS = 5
log = logging.getLogger("ordo.operator")


def name_for(task: dict[str, Any]) -> str:
    return PREFIX + str(task["metadata"]["uid"])


def calls_of(state: RunState, limit: int = MAX_BYTES) -> list[dict[str, Any]]:
    """The published form of the calls `state` waits for, in the order they were requested:
    callId, tool, arguments and argsDigest. The arguments are the parsed ones the call will
    run with (the model's response in the transcript)."""
    arguments: dict[str, dict[str, Any]] = {}
    for item in state.items:
        for call in getattr(item, "tool_calls", ()) or ():
            if call.id in state.approvals:
                arguments[call.id] = call.arguments or {}
    out = []
    for pending in state.approvals.values():
        args = arguments.get(pending.call_id, {})
        out.append(
            {
                "callId": pending.call_id,
                "tool": pending.tool,
                "arguments": args,
                "argsDigest": call_digest(args),
            }
        )
    return _bounded(out, limit)


def _bounded(calls: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """`calls`, the largest arguments left out until the publication fits in `limit` bytes."""
    size = len(_encode(calls))
    by_size = sorted(range(len(calls)), key=lambda i: -len(_encode(calls[i]["arguments"])))
    for i in by_size:
        if size <= limit:
            break
        size -= len(_encode(calls[i]["arguments"]))
        calls[i] = {k: v for k, v in calls[i].items() if k != "arguments"}
        calls[i]["argumentsOmitted"] = True
    return calls


def _encode(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _object(task: dict[str, Any], execution_id: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
    meta = task["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name_for(task),
            "namespace": meta.get("namespace", "default"),
            "labels": {
                LABEL: meta["name"][:63],
                UID_LABEL: meta["uid"],
                "app.kubernetes.io/managed-by": "ordo",
            },
            "annotations": {EXECUTION_ANNOTATION: execution_id},
            "ownerReferences": [owner_reference(task)],
        },
        "data": {KEY: _encode(calls)},
    }


async def publish(
    client: KubeClient, task: dict[str, Any], execution_id: str, state: RunState
) -> str | None:
    """Write the publication of the calls `state` waits for (create, or replace conditional on
    the version read). Returns the resourceVersion written (the precondition of `withdraw`)."""
    body = _object(task, execution_id, calls_of(state))
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    for _ in range(WRITE_ATTEMPTS):
        try:
            return _version(await client.create("ConfigMap", namespace, body))
        except ApiError as exc:
            if not (exc.conflict or exc.transient):
                raise
        current = await client.get("ConfigMap", namespace, name)
        if current is None:
            continue
        replacing = dict(body, metadata=dict(body["metadata"]))
        replacing["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        try:
            return _version(await client.replace("ConfigMap", namespace, name, replacing))
        except ApiError as exc:
            if not (exc.conflict or exc.transient or exc.not_found):
                raise
    raise ApiError(409, "Conflict", f"ConfigMap {name} kept changing while being published")


async def withdraw(
    client: KubeClient, task: dict[str, Any], resource_version: str | None = None
) -> None:
    """Delete the publication (absent: fine); with `resource_version`, only if nobody wrote it
    since (a 409 leaves it to its newer writer)."""
    meta = task["metadata"]
    try:
        await client.delete(
            "ConfigMap",
            meta.get("namespace", "default"),
            name_for(task),
            resource_version=resource_version,
        )
    except ApiError as exc:
        if not exc.conflict:
            raise


@dataclass(frozen=True, slots=True)
class Published:
    """One waiting call as published. `verified`: its digest is `args_digest` of its
    arguments (False: forged or corrupted; never show it)."""

    call_id: str
    tool: str
    arguments: dict[str, Any] | None
    digest: str
    verified: bool


class Unavailable(Exception):
    """No usable publication: the message says why (names objects only, never arguments)."""


async def read(client: KubeClient, task: dict[str, Any]) -> dict[str, Published]:
    """The published calls of `task` by call id. Raises `Unavailable` when there is no
    publication, it belongs to another execution than the Task's, or it does not parse."""
    meta = task.get("metadata") or {}
    if not meta.get("uid"):
        raise Unavailable("the Task has no uid yet")
    name = name_for(task)
    body = await client.get("ConfigMap", meta.get("namespace", "default"), name)
    if body is None:
        raise Unavailable(f"ConfigMap {name} (the published calls) does not exist")
    return parse(body, task)


def parse(body: dict[str, Any], task: dict[str, Any]) -> dict[str, Published]:
    """`read` of a publication already fetched."""
    name = name_for(task)
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    execution = (task.get("status") or {}).get("executionId")
    if not execution or annotations.get(EXECUTION_ANNOTATION) != execution:
        raise Unavailable(f"ConfigMap {name} was not written by the Task's current execution")
    try:
        calls = json.loads((body.get("data") or {})[KEY])
        out = {}
        for c in calls:
            arguments = c.get("arguments")
            digest = str(c["argsDigest"])
            if arguments is not None and not isinstance(arguments, dict):
                raise TypeError("arguments")
            verified = arguments is None or (digest != "" and call_digest(arguments) == digest)
            out[str(c["callId"])] = Published(
                str(c["callId"]), str(c.get("tool", "")), arguments, digest, verified
            )
        return out
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise Unavailable(f"ConfigMap {name} does not parse ({type(exc).__name__})") from None


def _version(body: dict[str, Any] | None) -> str | None:
    value = ((body or {}).get("metadata") or {}).get("resourceVersion")
    return str(value) if value else None
