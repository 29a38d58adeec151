"""`ordo approvals TASK`, `ordo approve TASK CALLID`, `ordo reject TASK CALLID` (issue 16 §3).

`approvals` lists the tool calls a Task waits for, with their arguments read from the Task's
checkpoint ConfigMap under the caller's own RBAC (the chart's `approver` role may get
ConfigMaps); the arguments are never in the Task's status. `approve` / `reject` create a
ToolApproval naming the Task and the call, as the caller: requesters and approvers can be
different people. Also `kubectl ordo approvals|approve|reject`.
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
from ..operator.kube.auth import KubeconfigError, connect
from ..operator.kube.client import ApiError, KubeClient
from ..operator.tasks.approvals import pending_of, rfc3339
from ..operator.tasks.checkpoint import CheckpointUnreadable, decode, name_for

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
        p.set_defaults(func=run, action="decide", decision=decision)


async def _task(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    task = await kube.get("Task", namespace, name)
    if task is None:
        raise Refused(f"Task {name!r} not found in namespace {namespace!r}")
    return task


async def list_calls(kube: KubeClient, namespace: str, name: str) -> list[dict[str, Any]]:
    """The waiting calls: id, tool, step, deadline and (if the checkpoint is readable) the
    arguments."""
    task = await _task(kube, namespace, name)
    pending = pending_of(task)
    arguments: dict[str, Any] = {}
    note = None
    try:
        cm = await kube.get("ConfigMap", namespace, name_for(task))
        state = decode(cm) if cm is not None else None
        if state is not None:
            for item in state.items:
                for call in getattr(item, "tool_calls", ()) or ():
                    arguments[call.id] = call.arguments
    except ApiError as exc:
        note = f"arguments unavailable: the checkpoint could not be read ({exc.status} {exc.api_reason})"
    except CheckpointUnreadable as exc:
        note = f"arguments unavailable: {exc}"
    return [
        {
            "callId": p.call_id,
            "tool": p.tool,
            "step": p.step,
            "deadline": None if p.deadline == float("inf") else rfc3339(p.deadline),
            **({"arguments": arguments[p.call_id]} if p.call_id in arguments else {}),
            **({"note": note} if note else {}),
        }
        for p in pending
    ]


async def decide(
    kube: KubeClient,
    namespace: str,
    task_name: str,
    call_id: str,
    decision: str,
    reason: str | None,
) -> dict[str, Any]:
    task = await _task(kube, namespace, task_name)
    waiting = [p.call_id for p in pending_of(task)]
    if call_id not in waiting:
        shown = ", ".join(waiting) or "none"
        raise Refused(f"Task {task_name!r} does not wait for call {call_id!r} (waiting: {shown})")
    prefix = re.sub(r"[^a-z0-9-]", "-", f"{task_name}-{decision.lower()}-".lower())[:57]
    body: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ToolApproval",
        "metadata": {"generateName": prefix},
        "spec": {"taskRef": task_name, "callId": call_id, "decision": decision},
    }
    if reason:
        body["spec"]["reason"] = reason[:1024]
    return await kube.create("ToolApproval", namespace, body)


async def _run(args: argparse.Namespace, info: kopf.ConnectionInfo, out: TextIO) -> int:
    namespace = args.namespace or info.default_namespace or "default"
    kube = KubeClient(info, max_connections=2)
    try:
        if args.action == "list":
            calls = await list_calls(kube, namespace, args.task)
            if args.output == "json":
                json.dump(calls, out, indent=2)
                out.write("\n")
            elif not calls:
                print(f"Task {args.task} waits for no tool-call approval", file=out)
            for c in calls if args.output == "text" else []:
                print(
                    f"{c['callId']}  tool={c['tool']}  step={c['step']}  "
                    f"deadline={c['deadline'] or 'none'}",
                    file=out,
                )
                if "arguments" in c:
                    print(
                        "  " + json.dumps(c["arguments"], indent=2).replace("\n", "\n  "), file=out
                    )
                elif "note" in c:
                    print(f"  ({c['note']})", file=out)
            return EXIT_OK
        created = await decide(kube, namespace, args.task, args.call_id, args.decision, args.reason)
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
