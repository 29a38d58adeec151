"""AgentPolicy toolRules with the operator as a subprocess (issue 26 §6): a deny and an allow
of the same tool in one Task and an Audit rule (the tool server sees only the allowed call;
status, Events and the metric name the rules, never an argument value); a RequireApproval rule
parks the call for a ToolApproval and it then runs once; a rule that does not
compile makes the policy Ready=False and the Task fail PolicyUnavailable before any tool call;
the API server refuses duplicate rule names and an unknown action."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from tests.support.counting_tool import CountingTool
from tests.support.operator import (
    OperatorProcess,
    apply,
    doc,
    events,
    get_json,
    ready_condition,
    wait_for,
    wait_task,
)

from ordo.engine.approvals import args_digest
from ordo_devcluster import ControlPlane
from ordo_devcluster.errors import KubectlError

CANARY = 4242  # an argument value that must never leave the Task's own transcript


def rule(name: str, when: str, action: str = "Deny", **kw: Any) -> dict[str, Any]:
    return {"name": name, "tools": ["pay"], "when": when, "action": action, **kw}


def setup(
    cp: ControlPlane,
    ns: str,
    tool_url: str,
    rules: list[dict[str, Any]],
    amounts: tuple[int, ...] = (CANARY, 50),
) -> None:
    turns: list[dict[str, Any]] = [
        {"toolCalls": [{"tool": "pay", "arguments": {"amount": amount}}]} for amount in amounts
    ]
    turns.append({"text": "paid"})
    for manifest in (
        doc("ModelEndpoint", "model", {"provider": "mock", "mock": {"turns": turns}}),
        doc(
            "Tool",
            "pay",
            {
                "type": "http",
                "description": "pays",
                "http": {"url": tool_url},
                "inputSchema": {
                    "type": "object",
                    "properties": {"amount": {"type": "integer"}},
                    "required": ["amount"],
                },
            },
        ),
        doc("Agent", "payer", {"modelRef": "model", "tools": ["pay"], "limits": {"maxSteps": 4}}),
        doc("AgentPolicy", "limits", {"onToolDenied": "ReturnError", "toolRules": rules}),
    ):
        apply(cp, ns, manifest)


def test_a_deny_and_an_allow_of_the_same_tool_and_an_audit_rule(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    rules = [
        rule("over-100", "args.amount > 100", message="too much"),
        rule("review-over-10", "args.amount > 10", "RequireApproval", mode="Audit"),
    ]
    with CountingTool() as tool:
        setup(control_plane, namespace, tool.url, rules)
        apply(control_plane, namespace, doc("Task", "pay", {"agentRef": "payer", "input": "pay"}))
        body = wait_task(control_plane, namespace, "pay")
        status = body["status"]
        assert (status["phase"], status["reason"]) == ("Succeeded", "Succeeded"), status
        assert [c["body"] for c in tool.calls] == [{"amount": 50}]  # the 4242 call never ran
    assert [(r["decision"], r["reason"], r["outcome"]) for r in status["toolCalls"]] == [
        ("denied", "ToolRuleDenied: limits/over-100", "skipped"),
        (
            "allowed",
            "NoPermissionRequired; ToolRuleAudit: limits/review-over-10 would RequireApproval",
            "succeeded",
        ),
    ]
    warnings = [e for e in events(control_plane, namespace, "pay") if e["type"] == "Warning"]
    assert any("over-100" in e["message"] for e in warnings), warnings
    visible = json.dumps([status.get("toolCalls"), status.get("message"), warnings])
    assert str(CANARY) not in visible

    def counted() -> dict[str, float]:
        found: dict[str, float] = {}
        for line in operator.metrics().splitlines():
            if line.startswith("ordo_tool_rule_decisions_total{") and namespace in line:
                labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
                found[f"{labels['rule']}:{labels['result']}"] = float(line.rsplit(" ", 1)[1])
        return found if len(found) == 3 else {}

    assert wait_for(counted, what="the rule metric") == {
        "over-100:matched": 1.0,
        "over-100:notMatched": 1.0,
        "review-over-10:matched": 1.0,
    }
    assert str(CANARY) not in operator.metrics()


def test_a_require_approval_rule_parks_the_call_until_a_tool_approval(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    rules = [rule("over-100", "args.amount > 100", "RequireApproval")]
    with CountingTool() as tool:
        setup(control_plane, namespace, tool.url, rules, amounts=(CANARY,))
        apply(control_plane, namespace, doc("Task", "pay", {"agentRef": "payer", "input": "pay"}))

        def parked() -> list[dict[str, Any]] | None:
            task = get_json(control_plane, "task", "pay", "-n", namespace)
            pending: list[dict[str, Any]] = (task.get("status") or {}).get("pendingApprovals") or []
            return pending or None

        (pending,) = wait_for(parked, what="the call to wait for approval")
        assert pending["tool"] == "pay" and tool.count == 0
        approval = {"taskRef": "pay", "callId": pending["callId"], "decision": "Approve"}
        # Bound to the arguments the call will run with, naming the approver (issue 26 §5).
        me = control_plane.kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
        approval.update(argsDigest=args_digest({"amount": CANARY}), approvedBy=me.stdout.strip())
        apply(control_plane, namespace, doc("ToolApproval", "ok", approval))
        status = wait_task(control_plane, namespace, "pay")["status"]
        assert (status["phase"], status["reason"]) == ("Succeeded", "Succeeded"), status
        assert [c["body"] for c in tool.calls] == [{"amount": CANARY}]  # once, after approval
    (record,) = status["toolCalls"]
    assert (record["decision"], record["reason"], record["outcome"]) == (
        "allowed",
        "Approved: ok; ToolRuleApproval: limits/over-100",
        "succeeded",
    )
    assert record["approvedBy"] == [approval["approvedBy"]]


def test_a_rule_that_does_not_compile_fails_closed(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    with CountingTool() as tool:
        setup(control_plane, namespace, tool.url, [rule("over-100", "args.amonut.size( > 1")])

        def not_ready() -> dict[str, Any] | None:
            cond = ready_condition(control_plane, namespace, "agentpolicy", "limits")
            return cond if cond and cond["status"] == "False" else None

        cond = wait_for(not_ready, what="the policy's Ready=False")
        assert cond["reason"] == "InvalidSpec"
        assert "toolRules[0]" in cond["message"] and "'over-100'" in cond["message"], cond
        apply(control_plane, namespace, doc("Task", "pay", {"agentRef": "payer", "input": "pay"}))
        status = wait_task(control_plane, namespace, "pay")["status"]
        assert (status["phase"], status["reason"]) == ("Failed", "PolicyUnavailable"), status
        assert "'over-100'" in status["message"] and status["step"] == 0
        assert tool.count == 0


@pytest.mark.parametrize(
    ("rules", "refusal"),
    [
        ([rule("a", "true"), rule("a", "false")], "Duplicate value"),
        ([rule("a", "true", "Allow")], "Unsupported value"),
        ([{"name": "a", "tools": ["pay"], "action": "Deny"}], "Required value"),
        ([rule("a", "x" * 1025)], "Too long"),
    ],
)
def test_the_api_server_refuses_what_the_crd_can_check(
    control_plane: ControlPlane, namespace: str, rules: list[dict[str, Any]], refusal: str
) -> None:
    with pytest.raises(KubectlError) as info:
        apply(control_plane, namespace, doc("AgentPolicy", "bad", {"toolRules": rules}))
    assert refusal in str(info.value)
