"""`ordo approvals TASK`, `ordo approve TASK CALLID`, `ordo reject TASK CALLID` (issue 16 §3).

`approvals` lists the tool calls a Task waits for, with their arguments and `args_digest`
read from the calls the operator publishes for approvers (operator/tasks/pendingcalls.py: a
ConfigMap, under the caller's own RBAC; the chart's `approver` role may get ConfigMaps), never
from the checkpoint; a call whose published digest does not match its published arguments is
refused (shown as forged, without arguments). The arguments are never in the Task's status.
`approve` binds the ToolApproval to that digest (`spec.argsDigest`) and names the caller as
the API server knows them (`spec.approvedBy`, from a SelfSubjectReview; the chart's admission
policy refuses any other name). `approve` / `reject` create a
ToolApproval naming the Task and the call, as the caller: requesters and approvers can be
different people. A child Task's calls are decided on the child (docs/concepts.md#trees): for a
parent whose children wait (`status.children[].awaitingApproval`) both commands name the child
to look at. Also `kubectl ordo approvals|approve|reject`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from typing import Any, TextIO

import kopf

from ..api import GROUP, VERSION
from ..api.phases import TERMINAL_PHASES
from ..engine.approvals import PendingApproval
from ..operator.kube.auth import KubeconfigError, connect
from ..operator.kube.client import ApiError, KubeClient
from ..operator.tasks import pendingcalls
from ..operator.tasks.approvals import pending_of, rfc3339

EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2


class Refused(Exception):
    """Printed, exit 1: the Task does not exist or does not wait for that call."""


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task", metavar="TASK", help="the Task's name")
    parser.add_argument("--namespace", "-n", metavar="NS", help="namespace (default: context's)")
    parser.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: $KUBECONFIG)")
    parser.add_argument("--context", metavar="NAME", help="kubeconfig context to use")


def register(sub: Any) -> None:
    listing = sub.add_parser(
        "approvals", help="list the tool calls a Task waits for, with their arguments"
    )
    _common(listing)
    listing.add_argument("-o", "--output", choices=("text", "json"), default="text")
    listing.set_defaults(func=run, action="list")
    for verb, decision in (("approve", "Approve"), ("reject", "Reject")):
        p = sub.add_parser(verb, help=f"{verb} a tool call a Task waits for (a ToolApproval)")
        _common(p)
        p.add_argument("call_id", metavar="CALLID", help="the call id (`ordo approvals TASK`)")
        p.add_argument(
            "--reason", default=None, help="why, kept on the ToolApproval only (max 1024 chars)"
        )
        p.add_argument(
            "--approved-by",
            metavar="USER",
            default=None,
            help="your user name as the API server knows it (default: asked with a "
            "SelfSubjectReview); admission refuses any other",
        )
        if decision == "Approve":
            p.add_argument(
                "--digest",
                metavar="DIGEST",
                default=None,
                help="the argsDigest `ordo approvals` showed you: refused if the call's "
                "arguments have another (default: the published one)",
            )
        p.set_defaults(func=run, action="decide", decision=decision)


async def _task(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    task = await kube.get("Task", namespace, name)
    if task is None:
        raise Refused(f"Task {name!r} not found in namespace {namespace!r}")
    return task


async def list_calls(kube: KubeClient, namespace: str, name: str) -> list[dict[str, Any]]:
    """The waiting calls: id, tool, step, deadline and, from the Task's published calls
    (operator/tasks/pendingcalls.py), the arguments and their digest. A call whose published
    digest is not the digest of its published arguments is shown without either, as forged."""
    return await calls_of(kube, await _task(kube, namespace, name))


async def calls_of(kube: KubeClient, task: dict[str, Any]) -> list[dict[str, Any]]:
    """`list_calls` of a Task already read."""
    pending = pending_of(task)
    published: dict[str, pendingcalls.Published] = {}
    note = None
    if pending:
        try:
            published = await pendingcalls.read(kube, task)
        except ApiError as exc:
            note = f"arguments unavailable: the published calls could not be read ({exc.status} {exc.api_reason})"
        except pendingcalls.Unavailable as exc:
            note = f"arguments unavailable: {exc}"
    return [_shown(p, published.get(p.call_id), note) for p in pending]


def children_waiting(task: dict[str, Any]) -> list[str]:
    """The child Tasks that wait for a decision on one of their own calls, as the parent's
    `status.children` lists them (the operator keeps it current while the parent waits)."""
    status = task.get("status")
    children = status.get("children") if isinstance(status, dict) else None
    if not isinstance(children, list):
        return []
    return [
        str(child["name"])
        for child in children
        if isinstance(child, dict)
        and isinstance(child.get("name"), str)
        and child.get("awaitingApproval") is True
        and child.get("phase") not in TERMINAL_PHASES
    ]


def children_hint(children: list[str]) -> str:
    """Where a parent's approvals are, when its children wait for them."""
    return "; ".join(
        f"child Task {name} waits for an approval: ordo approvals {name}" for name in children
    )


def _shown(
    p: PendingApproval, published: pendingcalls.Published | None, note: str | None
) -> dict[str, Any]:
    shown: dict[str, Any] = {
        "callId": p.call_id,
        "tool": p.tool,
        "step": p.step,
        "deadline": None if p.deadline == float("inf") else rfc3339(p.deadline),
    }
    if p.approvals > 1:
        shown["requiredApprovals"] = p.approvals
    if p.requester_excluded:
        shown["requesterExcluded"] = True
    if published is None:
        shown["note"] = note or "arguments unavailable: the call is not in the published calls"
    elif not published.verified or published.tool != p.tool:
        shown["note"] = (
            "REFUSED: the published arguments do not match their digest (or tool): "
            "the publication was altered; do not approve this call"
        )
        shown["forged"] = True
    else:
        shown["argsDigest"] = published.digest
        if published.arguments is None:
            shown["note"] = "arguments too large to publish; only their digest is shown"
        else:
            shown["arguments"] = published.arguments
    return shown


def text_listing(task: str, calls: list[dict[str, Any]], children: list[str]) -> list[str]:
    """`ordo approvals TASK` as text: each waiting call (id, tool, step, deadline, digest,
    arguments, note), then the children that wait for approvals of their own."""
    lines = []
    if not calls:
        of_its_own = " of its own" if children else ""
        lines.append(f"Task {task} waits for no tool-call approval{of_its_own}")
    for c in calls:
        lines.append(
            f"{c['callId']}  tool={c['tool']}  step={c['step']}  "
            f"deadline={c['deadline'] or 'none'}"
            + (f"  approvers={c['requiredApprovals']}" if "requiredApprovals" in c else "")
            + ("  not-the-requester" if c.get("requesterExcluded") else "")
        )
        if "argsDigest" in c:
            lines.append(f"  digest: {c['argsDigest']}")
        if "arguments" in c:
            lines.append("  " + json.dumps(c["arguments"], indent=2).replace("\n", "\n  "))
        if "note" in c:
            lines.append(f"  ({c['note']})")
    lines.extend(children_hint([name]) for name in children)
    return lines


async def decide(
    kube: KubeClient,
    namespace: str,
    task_name: str,
    call_id: str,
    decision: str,
    reason: str | None,
    *,
    digest: str | None = None,
    approved_by: str | None = None,
) -> dict[str, Any]:
    """Create the ToolApproval. An Approve names the digest of the arguments published for the
    call (`digest`, if given, must equal it: what the approver saw) and the caller's user
    name (a SelfSubjectReview unless `approved_by` is given; admission checks it)."""
    task = await _task(kube, namespace, task_name)
    waiting = [p.call_id for p in pending_of(task)]
    if call_id not in waiting:
        shown = ", ".join(waiting) or "none"
        children = children_waiting(task)
        hint = f"; {children_hint(children)}" if children else ""
        raise Refused(
            f"Task {task_name!r} does not wait for call {call_id!r} (waiting: {shown}){hint}"
        )
    spec: dict[str, Any] = {"taskRef": task_name, "callId": call_id, "decision": decision}
    if decision == "Approve":
        spec["argsDigest"] = await _approved_digest(kube, task, call_id, digest)
    who = approved_by or await _username(kube, required=decision == "Approve")
    if who:
        spec["approvedBy"] = who
    if reason:
        spec["reason"] = reason[:1024]
    prefix = re.sub(r"[^a-z0-9-]", "-", f"{task_name}-{decision.lower()}-".lower())[:57]
    body: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ToolApproval",
        "metadata": {"generateName": prefix},
        "spec": spec,
    }
    return await kube.create("ToolApproval", namespace, body)


async def _approved_digest(
    kube: KubeClient, task: dict[str, Any], call_id: str, seen: str | None
) -> str:
    """The digest an Approve binds to: the published one (`seen`, if given, must match it), or
    `seen` alone when the publication cannot be read (the operator checks it either way)."""
    try:
        published = (await pendingcalls.read(kube, task)).get(call_id)
    except (ApiError, pendingcalls.Unavailable) as exc:
        if seen:
            return seen
        raise Refused(
            f"cannot approve call {call_id!r}: its published arguments are unavailable ({exc}); "
            "pass --digest with the digest of the arguments you approve"
        ) from None
    if published is None or not published.verified or not published.digest:
        raise Refused(f"cannot approve call {call_id!r}: its published arguments are not usable")
    if seen and seen != published.digest:
        raise Refused(
            f"call {call_id!r} now has arguments with digest {published.digest}, not {seen}: "
            "run `ordo approvals` again"
        )
    return published.digest


async def _username(kube: KubeClient, *, required: bool) -> str:
    """The caller's user name from the API server ("" if it cannot say and none is needed)."""
    try:
        name = await kube.username()
    except ApiError as exc:
        if not required:
            return ""
        raise Refused(
            f"cannot learn your user name from the API server ({exc.status} {exc.api_reason}); "
            "pass --approved-by with it"
        ) from None
    if not name and required:
        raise Refused("the API server named no user for you; pass --approved-by")
    return name


async def _run(args: argparse.Namespace, info: kopf.ConnectionInfo, out: TextIO) -> int:
    namespace = args.namespace or info.default_namespace or "default"
    kube = KubeClient(info, max_connections=2)
    try:
        if args.action == "list":
            task = await _task(kube, namespace, args.task)
            calls = await calls_of(kube, task)
            children = children_waiting(task)
            if args.output == "json":
                json.dump(calls, out, indent=2)
                out.write("\n")
                for name in children:  # stdout stays the calls' JSON
                    print(children_hint([name]), file=sys.stderr)
            else:
                out.write("".join(line + "\n" for line in text_listing(args.task, calls, children)))
            return EXIT_REFUSED if any(c.get("forged") for c in calls) else EXIT_OK
        created = await decide(
            kube,
            namespace,
            args.task,
            args.call_id,
            args.decision,
            args.reason,
            digest=getattr(args, "digest", None),
            approved_by=args.approved_by,
        )
        print(f"toolapproval/{created['metadata']['name']} created", file=out)
        return EXIT_OK
    finally:
        await kube.close()


def run(args: argparse.Namespace) -> int:
    try:
        info = connect(args.kubeconfig, args.context)
        return asyncio.run(_run(args, info, sys.stdout))
    except Refused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except KubeconfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ApiError as exc:
        print(f"error: Kubernetes API: {exc}", file=sys.stderr)
        return EXIT_USAGE
