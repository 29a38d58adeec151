"""Human approval of tool calls with the operator as a subprocess (issue 16 §3): the Task waits
(condition, status, Event, gauge, printer column) without holding its slot; the approver is a
different identity (a ServiceAccount bound to the chart's approver rules) using `ordo approve`;
an operator SIGKILL while waiting, then a restart; the approved non-idempotent tool runs exactly
once. Rejection and timeout; nothing of the arguments or the reason in status, Events, logs or
metrics."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.support.counting_tool import CountingTool
from tests.support.openai_server import OpenAIServer
from tests.support.operator import (
    OperatorProcess,
    apply,
    doc,
    events,
    get_json,
    wait_for,
    wait_task,
)

from ordo.engine.approvals import args_digest
from ordo_devcluster import ControlPlane

ARGUMENT_CANARY = "canary-arg-7f3e91"
REASON_CANARY = "canary-reason-55ab02"
APPROVER_RULES = """
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: approver}
rules:
  - apiGroups: [ordo.dev]
    resources: [toolapprovals]
    verbs: [create, get, list, watch]
  - apiGroups: [ordo.dev]
    resources: [tasks]
    verbs: [get, list, watch]
  - apiGroups: [""]
    resources: [configmaps]
    verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: approver}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: approver}
subjects: [{kind: ServiceAccount, name: approver}]
"""


def setup(cp: ControlPlane, ns: str, model_url: str, tool_url: str, timeout: str = "1h") -> None:
    approval = {"required": True, "timeout": timeout}
    for manifest in (
        doc(
            "ModelEndpoint",
            "model",
            {"provider": "openai-compatible", "baseUrl": model_url, "model": "gpt-test"},
        ),
        doc(
            "Tool",
            "deploy",
            {
                "type": "http",
                "description": "deploys",
                "http": {"url": tool_url},
                "approval": approval,
            },
        ),
        doc("Agent", "agent", {"modelRef": "model", "tools": ["deploy"]}),
    ):
        apply(cp, ns, manifest)


def script() -> list[dict[str, Any]]:
    call = {"name": "deploy", "arguments": {"target": ARGUMENT_CANARY}, "id": "call_1"}
    return [{"tool_calls": [call]}, {"text": "deployed"}]


def waiting(cp: ControlPlane, ns: str, name: str) -> dict[str, Any] | None:
    task = get_json(cp, "task", name, "-n", ns)
    for c in (task.get("status") or {}).get("conditions") or []:
        if c["type"] == "AwaitingApproval" and c["status"] == "True":
            return task
    return None


def ordo(cp: ControlPlane, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = cp.env()
    env["KUBECONFIG"] = str(kubeconfig)
    return subprocess.run(
        [sys.executable, "-m", "ordo.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def operator(operator_factory: Callable[..., OperatorProcess]) -> OperatorProcess:
    return operator_factory("--max-concurrent-tasks", "1")


def assert_no_canary(cp: ControlPlane, ns: str, name: str, op: OperatorProcess) -> None:
    task = json.dumps(get_json(cp, "task", name, "-n", ns).get("status"))
    seen = json.dumps(events(cp, ns))
    for canary in (ARGUMENT_CANARY, REASON_CANARY):
        assert canary not in task and canary not in seen
        assert canary not in op.logs() and canary not in op.metrics()


def test_approved_by_another_identity_after_a_sigkill_runs_exactly_once(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    cp, ns = control_plane, namespace
    scripts = {"deploy it": script(), "hello": [{"text": "plain answer"}]}
    with CountingTool() as tool, OpenAIServer(scripts) as model:
        setup(cp, ns, model.url + "/v1", tool.url)
        apply(cp, ns, doc("Task", "gated", {"agentRef": "agent", "input": "deploy it"}))
        task = wait_for(lambda: waiting(cp, ns, "gated"), 60, what="AwaitingApproval")
        status = task["status"]
        assert status["phase"] == "Running" and tool.count == 0
        assert [p["callId"] for p in status["pendingApprovals"]] == ["call_1"]
        assert "deploy (call_1)" in json.dumps(status["conditions"])
        assert "AWAITING-APPROVAL" in cp.kubectl("get", "tasks", "-n", ns).stdout
        assert any(e.get("reason") == "AwaitingApproval" for e in events(cp, ns))
        wait_for(lambda: "ordo_tasks_awaiting_approval 1.0" in operator.metrics(), 30, what="gauge")

        # The slot is free: with --max-concurrent-tasks 1 another Task runs meanwhile.
        apply(cp, ns, doc("Agent", "plain", {"modelRef": "model"}))
        apply(cp, ns, doc("Task", "other", {"agentRef": "plain", "input": "hello"}))
        assert wait_task(cp, ns, "other")["status"]["phase"] == "Succeeded"

        operator.kill_and_restart()  # SIGKILL while waiting; state is in objects only

        cp.kubectl("create", "serviceaccount", "approver", "-n", ns)
        cp.kubectl("apply", "-n", ns, "-f", "-", input=APPROVER_RULES)
        approver = cp.service_account_kubeconfig(ns, "approver", create=False)
        listing = ordo(cp, approver, "approvals", "gated", "-n", ns)
        assert listing.returncode == 0, listing.stderr
        assert "call_1" in listing.stdout and ARGUMENT_CANARY in listing.stdout
        # Read from the published calls (not the checkpoint), with the digest an approval binds.
        digest = args_digest({"target": ARGUMENT_CANARY})
        assert f"digest: {digest}" in listing.stdout
        published = f"ordo-approval-{task['metadata']['uid']}"
        calls = json.loads(get_json(cp, "configmap", published, "-n", ns)["data"]["calls.json"])
        assert calls == [
            {
                "callId": "call_1",
                "tool": "deploy",
                "arguments": {"target": ARGUMENT_CANARY},
                "argsDigest": digest,
            }
        ]
        done = ordo(cp, approver, "approve", "gated", "call_1", "-n", ns, "--reason", REASON_CANARY)
        assert done.returncode == 0, done.stderr

        status = wait_task(cp, ns, "gated")["status"]
        assert (status["phase"], status["reason"]) == ("Succeeded", "Succeeded"), status
        assert tool.count == 1
        (record,) = [r for r in status["toolCalls"] if r.get("callId") == "call_1"]
        assert record["reason"].startswith("Approved: gated-approve-")
        wait_for(
            lambda: (
                not get_json(cp, "configmaps", "-n", ns, "-l", "ordo.dev/pending-calls-of")["items"]
            ),
            30,
            what="the published calls withdrawn once decided",
        )
        approval = get_json(cp, "toolapprovals", "-n", ns)["items"][0]
        wait_for(
            lambda: any(
                c["type"] == "Accepted"
                for c in (
                    get_json(cp, "toolapproval", approval["metadata"]["name"], "-n", ns).get(
                        "status"
                    )
                    or {}
                ).get("conditions", [])
            ),
            30,
            what="Accepted condition",
        )
        assert_no_canary(cp, ns, "gated", operator)


def test_rejected_and_timed_out_calls_never_run(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    cp, ns = control_plane, namespace
    scripts = {"deploy one": script(), "deploy two": script()}
    with CountingTool() as tool, OpenAIServer(scripts) as model:
        setup(cp, ns, model.url + "/v1", tool.url)
        apply(cp, ns, doc("Task", "rejected", {"agentRef": "agent", "input": "deploy one"}))
        wait_for(lambda: waiting(cp, ns, "rejected"), 60, what="AwaitingApproval")
        admin = Path(cp.kubeconfig)
        unknown = ordo(cp, admin, "reject", "rejected", "call_404", "-n", ns)
        assert unknown.returncode == 1 and "does not wait for call" in unknown.stderr
        done = ordo(cp, admin, "reject", "rejected", "call_1", "-n", ns, "--reason", REASON_CANARY)
        assert done.returncode == 0, done.stderr
        status = wait_task(cp, ns, "rejected")["status"]
        assert (status["phase"], status["reason"]) == ("Failed", "ApprovalRejected"), status
        assert tool.count == 0

        # A short timeout on the Tool: no decision → ApprovalTimedOut.
        setup(cp, ns, model.url + "/v1", tool.url, timeout="3s")
        apply(cp, ns, doc("Task", "timed-out", {"agentRef": "agent", "input": "deploy two"}))
        status = wait_task(cp, ns, "timed-out")["status"]
        assert (status["phase"], status["reason"]) == ("Failed", "ApprovalTimedOut"), status
        assert tool.count == 0
        assert_no_canary(cp, ns, "rejected", operator)


def accepted(cp: ControlPlane, ns: str, name: str) -> str | None:
    status = get_json(cp, "toolapproval", name, "-n", ns).get("status") or {}
    return next(
        (c["reason"] for c in status.get("conditions", []) if c["type"] == "Accepted"), None
    )


def test_an_approval_by_a_second_account_for_changed_arguments_is_refused(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    cp, ns = control_plane, namespace
    with CountingTool() as tool, OpenAIServer({"deploy it": script()}) as model:
        setup(cp, ns, model.url + "/v1", tool.url)
        apply(cp, ns, doc("Task", "gated", {"agentRef": "agent", "input": "deploy it"}))
        task = wait_for(lambda: waiting(cp, ns, "gated"), 60, what="AwaitingApproval")
        # Whoever may write ConfigMaps shows approvers other arguments, consistently digested.
        other = {"target": "harmless"}
        forged = [
            {
                "callId": "call_1",
                "tool": "deploy",
                "arguments": other,
                "argsDigest": args_digest(other),
            }
        ]
        patch = json.dumps({"data": {"calls.json": json.dumps(forged)}})
        published = f"ordo-approval-{task['metadata']['uid']}"
        cp.kubectl("patch", "configmap", published, "-n", ns, "--type=merge", "-p", patch)

        cp.kubectl("create", "serviceaccount", "approver", "-n", ns)
        cp.kubectl("apply", "-n", ns, "-f", "-", input=APPROVER_RULES)
        approver = cp.service_account_kubeconfig(ns, "approver", create=False)
        assert "harmless" in ordo(cp, approver, "approvals", "gated", "-n", ns).stdout
        done = ordo(cp, approver, "approve", "gated", "call_1", "-n", ns)
        assert done.returncode == 0, done.stderr
        name = done.stdout.split()[0].removeprefix("toolapproval/")

        # The operator binds the approval to the arguments the call will run with: refused.
        wait_for(lambda: accepted(cp, ns, name) == "DigestMismatch", 60, what="DigestMismatch")
        assert waiting(cp, ns, "gated") is not None and tool.count == 0
        # The run published the real arguments again; approving those runs the call once.
        listing = ordo(cp, approver, "approvals", "gated", "-n", ns)
        assert ARGUMENT_CANARY in listing.stdout and "harmless" not in listing.stdout
        done = ordo(cp, approver, "approve", "gated", "call_1", "-n", ns)
        assert done.returncode == 0, done.stderr
        status = wait_task(cp, ns, "gated")["status"]
        assert (status["phase"], tool.count) == ("Succeeded", 1)
        (record,) = [r for r in status["toolCalls"] if r.get("callId") == "call_1"]
        assert record["approvedBy"] == [f"system:serviceaccount:{ns}:approver"]
        assert accepted(cp, ns, name) == "DigestMismatch"
