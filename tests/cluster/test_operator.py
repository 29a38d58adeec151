"""The operator on the real control plane, models scripted with the mock provider.

Wire-protocol scenarios (OpenAI, Anthropic, HTTP tools) and restarts live in
test_operator_wire.py; these cover the Task lifecycle itself.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tests.support.operator import (
    OperatorProcess,
    apply,
    events,
    get_json,
    ready_condition,
    tasks,
    wait_for,
    wait_task,
)

from ordo_devcluster import ControlPlane

ROOT = Path(__file__).resolve().parents[2]

ENDPOINT = """
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {{name: {name}}}
spec:
  provider: mock
  model: mock-1
  mock:
    turns: {turns}
"""

TOOL = """
apiVersion: ordo.dev/v1alpha1
kind: Tool
metadata: {{name: {name}}}
spec:
  type: mock
  description: a canned tool
  mock: {{result: "ok"}}
  idempotent: true
"""

AGENT = """
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {{name: {name}}}
spec:
  modelRef: {model}
  prompt: You are terse.
  tools: {tools}
  limits: {{maxSteps: {max_steps}, timeout: {timeout}}}
"""

TASK = """
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {{name: {name}}}
spec:
  agentRef: {agent}
  input: do the thing
"""


def setup_agent(
    cp: ControlPlane,
    ns: str,
    turns: str,
    *,
    tools: str = "[]",
    max_steps: int = 10,
    timeout: str = "60s",
    agent: str = "agent",
) -> None:
    apply(cp, ns, ENDPOINT.format(name="model", turns=turns))
    apply(cp, ns, TOOL.format(name="lookup"))
    apply(
        cp,
        ns,
        AGENT.format(name=agent, model="model", tools=tools, max_steps=max_steps, timeout=timeout),
    )


def test_quickstart_succeeds_with_events_and_cleanup(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    apply(control_plane, namespace, ROOT / "examples" / "quickstart")
    task = wait_task(control_plane, namespace, "research-operators")
    status = task["status"]
    assert status["phase"] == "Succeeded", status
    assert status["reason"] == "Succeeded"
    assert status["step"] == 2
    assert status["usage"]["totalTokens"] > 0
    assert status["executionId"] and status["startedAt"] and status["completedAt"]
    assert status["toolCalls"][0]["tool"] == "web-search"
    assert status["toolCalls"][0]["decision"] == "allowed"
    assert status["observedGeneration"] == task["metadata"]["generation"]
    # The finalizer and the checkpoint go right after the terminal status is written.
    wait_for(
        lambda: (
            "ordo.dev/run"
            not in (
                get_json(control_plane, "task", "research-operators", "-n", namespace)[
                    "metadata"
                ].get("finalizers")
                or []
            )
        ),
        15,
        what="finalizer released",
    )
    reasons = [e["reason"] for e in events(control_plane, namespace, "research-operators")]
    assert "Started" in reasons and "Succeeded" in reasons
    # The checkpoint ConfigMap is removed when the Task ends.
    wait_for(
        lambda: not get_json(control_plane, "configmaps", "-n", namespace)["items"],
        15,
        what="checkpoint deleted",
    )
    # Referring objects are Ready.
    agent = wait_for(
        lambda: ready_condition(control_plane, namespace, "agent", "research-agent"),
        30,
        what="Agent Ready",
    )
    assert agent["status"] == "True"
    metrics = operator.metrics()
    assert (
        f'ordo_tasks_total{{agent="research-agent",namespace="{namespace}",phase="Succeeded",reason="Succeeded"}} 1.0'
        in metrics
    )
    assert "ordo_tool_calls_total" in metrics and "ordo_model_requests_total" in metrics


def test_governance_example_is_denied(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    apply(control_plane, namespace, ROOT / "examples" / "governance")
    names = [t["metadata"]["name"] for t in tasks(control_plane, namespace)]
    assert names
    for name in names:
        status = wait_task(control_plane, namespace, name)["status"]
        assert (status["phase"], status["reason"]) == ("Failed", "ToolDenied"), status
        denied = [c for c in status["toolCalls"] if c["decision"] == "denied"]
        assert denied and all(c["outcome"] == "skipped" for c in denied)
        warnings = [
            e for e in events(control_plane, namespace, name) if e["reason"] == "ToolDenied"
        ]
        assert warnings and warnings[0]["type"] == "Warning"
    assert 'decision="denied"' in operator.metrics()


def test_an_invented_tool_name_reaches_no_event_and_no_metric(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    """Issue 23: a name the model invents is `<not-offered>` in Events, the message and
    /metrics; only the Task's own status.toolCalls keeps it."""
    invented = "x_ZGItcGFzc3dvcmQ9aHVudGVyMvvvvv_-"  # base64 of a secret, URL alphabet
    setup_agent(control_plane, namespace, f"[{{toolCalls: [{{tool: {invented}}}]}}]")
    apply(control_plane, namespace, TASK.format(name="invents", agent="agent"))
    status = wait_task(control_plane, namespace, "invents")["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "ToolDenied"), status
    assert status["toolCalls"][0]["tool"] == invented
    assert invented not in status["message"] and "<not-offered>" in status["message"]
    shown = [e["message"] for e in events(control_plane, namespace, "invents")]
    assert shown and not any(invented in m or "ZGItcGFzc3dvcmQ9" in m for m in shown)
    metrics = operator.metrics()
    assert "ZGItcGFzc3dvcmQ9" not in metrics and 'tool="<not-offered>"' in metrics


def test_max_steps_fails_with_exact_step_count(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    turns = "[" + ", ".join(["{toolCalls: [{tool: memory_list}]}"] * 6) + "]"
    setup_agent(control_plane, namespace, turns, max_steps=3)
    apply(
        control_plane,
        namespace,
        """
apiVersion: ordo.dev/v1alpha1
kind: Memory
metadata: {name: notes}
spec: {provider: in-memory}
""",
    )
    control_plane.kubectl(
        "patch",
        "agent",
        "agent",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"memory":{"ref":"notes","allow":["list"]}}}',
    )
    apply(control_plane, namespace, TASK.format(name="loop", agent="agent"))
    status = wait_task(control_plane, namespace, "loop")["status"]
    assert (status["phase"], status["reason"], status["step"]) == ("Failed", "MaxStepsExceeded", 3)
    assert len(status["toolCalls"]) == 3


def test_timeout(control_plane: ControlPlane, namespace: str, operator: OperatorProcess) -> None:
    setup_agent(control_plane, namespace, "[{text: late, delay: 30s}]", timeout="1s")
    apply(control_plane, namespace, TASK.format(name="slow", agent="agent"))
    status = wait_task(control_plane, namespace, "slow", timeout=30)["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "Timeout")


@pytest.mark.parametrize(
    ("missing", "reason"),
    [("model", "ModelEndpointNotFound"), ("lookup", "ToolNotFound"), ("agent", "AgentNotFound")],
)
def test_missing_reference(
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorProcess,
    missing: str,
    reason: str,
) -> None:
    setup_agent(control_plane, namespace, "[{text: hi}]", tools="[lookup]")
    kind = {"model": "modelendpoint", "lookup": "tool", "agent": "agent"}[missing]
    control_plane.kubectl("delete", kind, missing, "-n", namespace)
    apply(control_plane, namespace, TASK.format(name="orphan", agent="agent"))
    status = wait_task(control_plane, namespace, "orphan")["status"]
    assert (status["phase"], status["reason"], status["step"]) == ("Failed", reason, 0)
    assert status["usage"]["totalTokens"] == 0
    if missing != "agent":
        cond = wait_for(
            lambda: (
                (c := ready_condition(control_plane, namespace, "agent", "agent"))
                and c["status"] == "False"
                and c
            ),
            30,
            what="Agent Ready=False",
        )
        assert missing in cond["message"]


def test_output_schema_valid_and_invalid(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    setup_agent(control_plane, namespace, "[]")
    schema = "{type: object, properties: {score: {type: integer}}, required: [score]}"
    apply(
        control_plane,
        namespace,
        f"""
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {{name: valid}}
spec:
  agentRef: agent
  input: rate it
  outputSchema: {schema}
""",
    )
    status = wait_task(control_plane, namespace, "valid")["status"]
    assert status["phase"] == "Succeeded", status
    assert isinstance(status["structuredOutput"]["score"], int)

    apply(
        control_plane,
        namespace,
        ENDPOINT.format(name="model", turns='[{text: "{\\"score\\": \\"CANARY-ANSWER-77\\"}"}]'),
    )
    apply(
        control_plane,
        namespace,
        f"""
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {{name: invalid}}
spec:
  agentRef: agent
  input: rate it
  outputSchema: {schema}
""",
    )
    status = wait_task(control_plane, namespace, "invalid")["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "InvalidOutput"), status
    assert "CANARY-ANSWER-77" not in status["message"]
    assert "$.score" in status["message"]


def test_cancel_mid_run(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    turns = "[{toolCalls: [{tool: lookup}], delay: 2s}, {text: never, delay: 2s}]"
    setup_agent(control_plane, namespace, turns, tools="[lookup]")
    apply(control_plane, namespace, TASK.format(name="stopme", agent="agent"))
    wait_task(control_plane, namespace, "stopme", phases=("Running",))
    control_plane.kubectl(
        "patch", "task", "stopme", "-n", namespace, "--type=merge", "-p", '{"spec":{"cancel":true}}'
    )
    status = wait_task(control_plane, namespace, "stopme")["status"]
    assert (status["phase"], status["reason"]) == ("Cancelled", "Cancelled"), status
    assert status["step"] < 2


def test_delete_mid_run_releases_the_finalizer(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    turns = "[{toolCalls: [{tool: lookup}], delay: 2s}, {text: never, delay: 2s}]"
    setup_agent(control_plane, namespace, turns, tools="[lookup]")
    apply(control_plane, namespace, TASK.format(name="goner", agent="agent"))
    running = wait_task(control_plane, namespace, "goner", phases=("Running",))
    assert "ordo.dev/run" in running["metadata"]["finalizers"]
    control_plane.kubectl("delete", "task", "goner", "-n", namespace, "--wait=false")
    wait_for(lambda: not tasks(control_plane, namespace), 30, what="Task deleted")
    reasons = [e["reason"] for e in events(control_plane, namespace, "goner")]
    assert "Cancelled" in reasons


def test_duplicate_idempotency_key(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    setup_agent(control_plane, namespace, "[{text: done, delay: 1s}]")
    for name in ("first", "second"):
        apply(
            control_plane,
            namespace,
            f"""
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {{name: {name}}}
spec: {{agentRef: agent, input: x, idempotencyKey: order-42}}
""",
        )
    first = wait_task(control_plane, namespace, "first")["status"]
    second = wait_task(control_plane, namespace, "second")["status"]
    assert first["phase"] == "Succeeded"
    assert (second["phase"], second["reason"], second["step"]) == (
        "Failed",
        "DuplicateExecution",
        0,
    )
    assert "first" in second["message"]


def test_spec_is_immutable_but_cancel_is_not(control_plane: ControlPlane, namespace: str) -> None:
    apply(control_plane, namespace, TASK.format(name="fixed", agent="agent"))
    for change in (
        '{"spec":{"agentRef":"other"}}',
        '{"spec":{"instructions":"new"}}',
        '{"spec":{"limits":{"maxSteps":2}}}',
    ):
        result = control_plane.kubectl(
            "patch", "task", "fixed", "-n", namespace, "--type=merge", "-p", change, check=False
        )
        assert result.returncode != 0 and "immutable" in result.stderr, change
    control_plane.kubectl(
        "patch", "task", "fixed", "-n", namespace, "--type=merge", "-p", '{"spec":{"cancel":true}}'
    )


def _conditions(body: dict[str, object]) -> dict[str, str]:
    status = body.get("status") or {}
    assert isinstance(status, dict)
    return {c["type"]: c["status"] for c in status.get("conditions") or []}


def test_kubectl_wait_returns_for_complete_and_failed_tasks(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    """`kubectl wait --for=condition=Failed` returns for a failed Task (it used to hang until
    its own timeout), and `--for=condition=Complete` for a succeeded one, as for a Job."""
    setup_agent(control_plane, namespace, "[{text: late, delay: 30s}]", timeout="1s")
    apply(control_plane, namespace, TASK.format(name="fails", agent="agent"))
    control_plane.kubectl(
        "wait", "-n", namespace, "--for=condition=Failed", "task/fails", "--timeout=60s"
    )
    failed = wait_task(control_plane, namespace, "fails", timeout=5)
    assert (
        _conditions(failed).items()
        >= {
            "Failed": "True",
            "Ready": "False",
            "Stalled": "True",
            "Running": "False",
        }.items()
    )
    assert "Complete" not in _conditions(failed)

    setup_agent(control_plane, namespace, "[{text: done}]", agent="quick")
    apply(control_plane, namespace, TASK.format(name="works", agent="quick"))
    control_plane.kubectl(
        "wait", "-n", namespace, "--for=condition=Complete", "task/works", "--timeout=60s"
    )
    works = wait_task(control_plane, namespace, "works", timeout=5)
    assert (
        _conditions(works).items()
        >= {
            "Complete": "True",
            "Ready": "True",
            "Succeeded": "True",
        }.items()
    )
    assert "Failed" not in _conditions(works) and "Stalled" not in _conditions(works)


def test_a_task_applied_before_its_agent_waits_then_succeeds(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    """GitOps applies in any order: a Task whose Agent is missing waits Pending (naming what
    is missing) within its grace period, and runs once the Agent appears — instead of failing
    AgentNotFound for good."""
    apply(
        control_plane,
        namespace,
        """
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata:
  name: early
  annotations: {ordo.dev/reference-grace: 90s}
spec:
  agentRef: late-agent
  input: do the thing
""",
    )
    deadline = time.monotonic() + 30
    ready: dict[str, str] = {}
    while time.monotonic() < deadline:
        body = get_json(control_plane, "task", "early", "-n", namespace)
        status = body.get("status") or {}
        ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
        if ready.get("reason") == "WaitingForReferences":
            break
        time.sleep(0.5)
    assert ready.get("reason") == "WaitingForReferences", ready
    assert "late-agent" in ready["message"] and status.get("phase") == "Pending"
    events = control_plane.kubectl("get", "events", "-n", namespace, "-o", "json").stdout
    assert "WaitingForReferences" in events
    setup_agent(control_plane, namespace, "[{text: done}]", agent="late-agent")
    final = wait_task(control_plane, namespace, "early", timeout=60)["status"]
    assert (final["phase"], final["reason"]) == ("Succeeded", "Succeeded")


def test_missing_reference_fails_after_the_grace_period(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    apply(
        control_plane,
        namespace,
        """
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata:
  name: never
  annotations: {ordo.dev/reference-grace: 3s}
spec:
  agentRef: nobody
  input: do the thing
""",
    )
    final = wait_task(control_plane, namespace, "never", timeout=60)["status"]
    assert (final["phase"], final["reason"]) == ("Failed", "AgentNotFound")
    assert final.get("step", 0) == 0
