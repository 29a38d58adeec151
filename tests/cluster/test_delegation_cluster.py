"""Trees of Tasks in the operator (issue 27): a parent's `agent` Tool call creates a child Task
(an object owned by the parent), the parent waits for it holding no slot, and resumes with the
child's answer. The model is the scripted OpenAI-wire server; parent and child follow their
own scripts (a marker in their input), side effects go to a counting HTTP tool."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pytest
from tests.support.counting_tool import CountingTool
from tests.support.credentials import opted_in
from tests.support.openai_server import OpenAIServer
from tests.support.operator import (
    OperatorProcess,
    apply,
    events,
    get_json,
    tasks,
    wait_for,
    wait_task,
)

from ordo.runtime.delegation import PARENT_LABEL, PARENT_UID_LABEL, ROOT_LABEL, child_name
from ordo_devcluster import ControlPlane

KEY = "sk-delegation-test"
PARENT, CHILD = "PARENT-7c1", "CHILD-2e9"
"""Markers in the parent's and the child's input: each follows its own script."""
CALL = "call_delegate"


def doc(kind: str, name: str, spec: dict[str, Any]) -> str:
    return json.dumps(
        {"apiVersion": "ordo.dev/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec}
    )


def agent(name: str, tools: list[str], **limits: Any) -> str:
    return doc(
        "Agent",
        name,
        {
            "modelRef": "model",
            "prompt": f"You are {name}.",
            "tools": tools,
            "limits": {"maxSteps": 6, "timeout": "120s", **limits},
        },
    )


def agent_tool(name: str, target: str) -> str:
    return doc(
        "Tool",
        name,
        {"type": "agent", "description": f"ask {target}", "agent": {"ref": target}},
    )


def http_tool(name: str, url: str) -> str:
    return doc(
        "Tool",
        name,
        {
            "type": "http",
            "description": "records an order",
            "inputSchema": {"type": "object", "properties": {"item": {"type": "string"}}},
            "http": {"url": url},
            "idempotent": False,
            "timeout": "30s",
        },
    )


def task(name: str, agent_ref: str, text: str, **spec: Any) -> str:
    return doc("Task", name, {"agentRef": agent_ref, "input": text, **spec})


def delegate(tool: str = "ask-helper", delay: float = 0.0) -> dict[str, Any]:
    step: dict[str, Any] = {
        "tool_calls": [{"name": tool, "arguments": {"input": f"{CHILD} find it"}, "id": CALL}],
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    if delay:
        step["delay"] = delay
    return step


def answer(text: str, tokens: int = 5, delay: float = 0.0) -> dict[str, Any]:
    step: dict[str, Any] = {"text": text, "usage": {"input_tokens": tokens, "output_tokens": 1}}
    if delay:
        step["delay"] = delay
    return step


def install(cp: ControlPlane, ns: str, model_url: str, *docs: str) -> None:
    """The model's Secret and ModelEndpoint `model`, then `docs`."""
    key = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": opted_in({"name": "model-key", "namespace": ns}),
        "data": {"api-key": base64.b64encode(KEY.encode()).decode()},
    }
    model = {
        "provider": "openai-compatible",
        "baseUrl": model_url + "/v1",
        "model": "gpt-test",
        "credentials": {"secretRef": {"name": "model-key", "key": "api-key"}},
        "retry": {"maxAttempts": 2, "backoff": "100ms"},
    }
    for d in (json.dumps(key), doc("ModelEndpoint", "model", model), *docs):
        apply(cp, ns, d)


def children_of(cp: ControlPlane, ns: str, parent: str) -> list[dict[str, Any]]:
    return [
        t for t in tasks(cp, ns) if (t["metadata"].get("labels") or {}).get(PARENT_LABEL) == parent
    ]


def tool_messages(body: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in body.get("messages", []) if m.get("role") == "tool"]


def parent_requests(model: OpenAIServer) -> list[dict[str, Any]]:
    return [b for b in model.bodies if PARENT in json.dumps(b)]


@pytest.mark.parametrize("workers", ["auto", "0"], ids=["workers", "in-process"])
def test_parent_delegates_to_a_child_with_one_slot(
    control_plane: ControlPlane,
    namespace: str,
    operator_factory: Callable[..., OperatorProcess],
    workers: str,
) -> None:
    """With --max-concurrent-tasks 1 the parent waits holding no slot: the child runs, the
    parent resumes with its answer in the history and its tokens in its usage; the child is
    an object owned by the parent, labelled with parent and root, listed in status.children.
    The runs in worker processes and on the operator's own loop alike."""
    cp, ns = control_plane, namespace
    script = {PARENT: [delegate(), answer("the child said 42", 7)], CHILD: [answer("42", 20)]}
    with OpenAIServer(script, require_key=KEY) as model:
        install(
            cp,
            ns,
            model.url,
            agent("helper", []),
            agent_tool("ask-helper", "helper"),
            agent("boss", ["ask-helper"]),
        )
        operator = operator_factory("--max-concurrent-tasks", "1", "--workers", workers)
        apply(cp, ns, task("root", "boss", f"{PARENT} what is it"))
        status = wait_task(cp, ns, "root")["status"]
        assert (status["phase"], status.get("output")) == ("Succeeded", "the child said 42"), (
            status,
            operator.task_log("root"),
        )
        parent = get_json(cp, "task", "root", "-n", ns)
        (child,) = children_of(cp, ns, "root")
        meta = child["metadata"]
        assert meta["name"] == child_name("root", parent["metadata"]["uid"], CALL)
        assert meta["labels"][PARENT_UID_LABEL] == parent["metadata"]["uid"]
        assert meta["labels"][ROOT_LABEL] == "root"
        (owner,) = meta["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == (
            "Task",
            parent["metadata"]["uid"],
            True,
        )
        assert child["spec"]["agentRef"] == "helper"
        assert CHILD in json.dumps(child["spec"]["input"])
        assert child["status"]["phase"] == "Succeeded"
        child_tokens = child["status"]["usage"]["totalTokens"]
        assert child_tokens == 21
        # The child's answer is the call's result in the parent's history.
        second = parent_requests(model)[-1]
        assert any("42" in m for m in tool_messages(second)), tool_messages(second)
        # The parent's usage covers the tree: its own calls (15 + 8) and the child's.
        assert status["usage"]["totalTokens"] == 15 + 8 + child_tokens, status["usage"]
        (listed,) = status["children"]
        assert (listed["name"], listed["agent"], listed["phase"]) == (
            meta["name"],
            "helper",
            "Succeeded",
        )
        reasons = [e["reason"] for e in events(cp, ns, "root")]
        assert "ChildCreated" in reasons and "AwaitingChildren" in reasons, reasons
        # `kubectl get tasks` shows the tree.
        table = cp.kubectl("get", "tasks", "-n", ns).stdout
        assert any(meta["name"] in line and " root " in f" {line} " for line in table.splitlines())
        assert 'ordo_delegations_total{namespace="' + ns + '",outcome="created"} 1.0' in (
            operator.metrics()
        )


def test_cycle_and_depth_are_refused_without_a_task(
    control_plane: ControlPlane,
    namespace: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    """A -> A is a cycle; a Task at the depth limit may not delegate: both calls are denied
    before any child exists, and under the default onToolDenied Fail the Task ends with that
    reason. No second Task."""
    cp, ns = control_plane, namespace
    script = {PARENT: [delegate("ask-self")], "DEPTH-41": [delegate("ask-helper")]}
    with OpenAIServer(script, require_key=KEY) as model:
        install(
            cp,
            ns,
            model.url,
            agent("helper", []),
            agent_tool("ask-helper", "helper"),
            agent_tool("ask-self", "boss"),
            agent("boss", ["ask-self", "ask-helper"]),
        )
        operator = operator_factory("--max-delegation-depth", "1")
        apply(cp, ns, task("cycle", "boss", f"{PARENT} go"))
        status = wait_task(cp, ns, "cycle")["status"]
        assert (status["phase"], status["reason"]) == ("Failed", "DelegationCycle"), (
            status,
            operator.task_log("cycle"),
        )
        (record,) = [r for r in status["toolCalls"] if r.get("callId") == CALL]
        assert record["decision"] == "denied", record
        assert [t["metadata"]["name"] for t in tasks(cp, ns)] == ["cycle"]
        # Depth: a Task whose chain says it is at depth 1 (the limit) may not delegate.
        deep = json.loads(task("deep", "boss", "DEPTH-41 go"))
        deep["metadata"]["annotations"] = {
            "ordo.dev/delegation-chain": json.dumps(["other", "boss"])
        }
        apply(cp, ns, json.dumps(deep))
        status = wait_task(cp, ns, "deep")["status"]
        assert (status["phase"], status["reason"]) == ("Failed", "DelegationDepthExceeded"), (
            status,
            operator.task_log("deep"),
        )
        assert sorted(t["metadata"]["name"] for t in tasks(cp, ns)) == ["cycle", "deep"]
        assert len(model.bodies) == 2
        metrics = operator.metrics()
        for outcome in ("cycle", "depth"):
            assert f'ordo_delegations_total{{namespace="{ns}",outcome="{outcome}"}} 1.0' in (
                metrics
            )


def test_an_impostor_is_not_adopted(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    """A Task pre-created under the child's name, not owned by the parent, is never adopted:
    the call fails ChildNotOwned, the impostor is left as it was."""
    cp, ns = control_plane, namespace
    script = {PARENT: [delegate(delay=4.0), answer("could not ask")], CHILD: [answer("evil")]}
    with OpenAIServer(script, require_key=KEY) as model:
        install(
            cp,
            ns,
            model.url,
            agent("helper", []),
            agent_tool("ask-helper", "helper"),
            agent("boss", ["ask-helper"]),
        )
        apply(cp, ns, task("victim", "boss", f"{PARENT} go"))
        uid = get_json(cp, "task", "victim", "-n", ns)["metadata"]["uid"]
        name = child_name("victim", uid, CALL)
        apply(cp, ns, task(name, "helper", f"{CHILD} pretend", cancel=True))
        status = wait_task(cp, ns, "victim")["status"]
        assert status["phase"] == "Succeeded", (status, operator.task_log("victim"))
        (record,) = [r for r in status["toolCalls"] if r.get("callId") == CALL]
        assert (record["outcome"], record.get("error")) == ("error", "ChildNotOwned"), record
        assert any(
            "not a child of this Task" in m for m in tool_messages(parent_requests(model)[-1])
        )
        impostor = get_json(cp, "task", name, "-n", ns)
        assert not impostor["metadata"].get("ownerReferences")
        assert len(tasks(cp, ns)) == 2
        assert all(PARENT in json.dumps(b) for b in model.bodies)  # no child ever ran


def test_cancel_cascades_to_the_children(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    """A parent cancelled while its child runs ends Cancelled, and so does the child."""
    cp, ns = control_plane, namespace
    script = {PARENT: [delegate()], CHILD: [answer("slow", delay=60.0)]}
    with OpenAIServer(script, require_key=KEY) as model:
        install(
            cp,
            ns,
            model.url,
            agent("helper", []),
            agent_tool("ask-helper", "helper"),
            agent("boss", ["ask-helper"]),
        )
        apply(cp, ns, task("cancelled", "boss", f"{PARENT} go"))
        wait_for(lambda: children_of(cp, ns, "cancelled") or None, 60, what="the child Task")
        wait_for(
            lambda: any(CHILD in json.dumps(b) for b in model.bodies) or None,
            60,
            what="the child's model call",
        )
        cp.kubectl(
            "patch", "task", "cancelled", "-n", ns, "--type=merge", "-p", '{"spec":{"cancel":true}}'
        )
        assert wait_task(cp, ns, "cancelled")["status"]["phase"] == "Cancelled"
        (child,) = children_of(cp, ns, "cancelled")
        child_status = wait_task(cp, ns, child["metadata"]["name"])["status"]
        assert child_status["phase"] == "Cancelled", (
            child_status,
            operator.task_log(child["metadata"]["name"]),
        )


def test_a_deleted_parent_takes_its_children(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    """Deleting a parent whose child runs deletes the child (the operator does it, also on a
    control plane without a garbage collector, as this one)."""
    cp, ns = control_plane, namespace
    script = {PARENT: [delegate()], CHILD: [answer("slow", delay=60.0)]}
    with OpenAIServer(script, require_key=KEY) as model:
        install(
            cp,
            ns,
            model.url,
            agent("helper", []),
            agent_tool("ask-helper", "helper"),
            agent("boss", ["ask-helper"]),
        )
        apply(cp, ns, task("doomed", "boss", f"{PARENT} go"))
        wait_for(
            lambda: any(CHILD in json.dumps(b) for b in model.bodies) or None,
            60,
            what="the child's model call",
        )
        cp.kubectl("delete", "task", "doomed", "-n", ns, "--wait=false")
        wait_for(
            lambda: not tasks(cp, ns) or None,
            60,
            what=f"the parent and its child to be gone: {operator.task_log('doomed')}",
        )


def test_sigkill_while_the_child_runs_and_while_the_parent_waits(
    control_plane: ControlPlane,
    namespace: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    """The operator is killed while the child's non-idempotent tool call is in flight, and
    again while the parent waits for the child: exactly one child, the tool ran once, the
    parent Succeeds with the child's answer."""
    cp, ns = control_plane, namespace
    order = {"tool_calls": [{"name": "place-order", "arguments": {"item": "w"}, "id": "call_o"}]}
    script = {
        PARENT: [delegate(), answer("ordered via helper")],
        CHILD: [order, answer("placed", delay=8.0)],
    }
    with CountingTool(delay=3.0) as tool, OpenAIServer(script, require_key=KEY) as model:
        install(
            cp,
            ns,
            model.url,
            http_tool("place-order", tool.url),
            agent("helper", ["place-order"]),
            agent_tool("ask-helper", "helper"),
            agent("boss", ["ask-helper"]),
        )
        operator = operator_factory("--lease-seconds", "5")
        apply(cp, ns, task("killed", "boss", f"{PARENT} go"))
        wait_for(lambda: tool.count or None, 60, what="the child's tool call")
        operator.kill_and_restart()  # the child's call is in flight (it takes 3 s)
        wait_for(
            lambda: sum(CHILD in json.dumps(b) for b in model.bodies) >= 2 or None,
            90,
            what="the child's final model call",
        )
        operator.kill_and_restart()  # the parent waits; the child's answer takes 8 s
        status = wait_task(cp, ns, "killed", timeout=180)["status"]
        assert (status["phase"], status.get("output")) == ("Succeeded", "ordered via helper"), (
            status,
            operator.task_log("killed"),
        )
        assert len(children_of(cp, ns, "killed")) == 1
        assert tool.count == 1


def test_a_budget_spent_by_the_child_ends_both(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    """The child's budget is what the parent has left; a child that spends it ends
    TokenBudgetExceeded, and its tokens, counted in the parent's usage, end the parent so."""
    cp, ns = control_plane, namespace
    script = {PARENT: [delegate(), answer("never")], CHILD: [answer("expensive", 500)]}
    with OpenAIServer(script, require_key=KEY) as model:
        install(
            cp,
            ns,
            model.url,
            agent("helper", []),
            agent_tool("ask-helper", "helper"),
            agent("boss", ["ask-helper"]),
        )
        apply(cp, ns, task("budget", "boss", f"{PARENT} go", limits={"maxTokens": 100}))
        status = wait_task(cp, ns, "budget")["status"]
        assert (status["phase"], status["reason"]) == ("Failed", "TokenBudgetExceeded"), (
            status,
            operator.task_log("budget"),
        )
        (child,) = children_of(cp, ns, "budget")
        assert child["spec"]["limits"]["maxTokens"] <= 100 - 15
        assert (child["status"]["phase"], child["status"]["reason"]) == (
            "Failed",
            "TokenBudgetExceeded",
        )
        assert status["usage"]["totalTokens"] >= 15 + 501
        assert len(parent_requests(model)) == 1


def test_sigkill_right_after_the_child_was_created(
    control_plane: ControlPlane,
    namespace: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    """The operator is killed as soon as the child Task exists (the parent's run may not have
    written a checkpoint since): the resumed parent finds that child, asks the model no second
    time for the call, and succeeds with one child."""
    cp, ns = control_plane, namespace
    script = {PARENT: [delegate(), answer("got 42")], CHILD: [answer("42", delay=3.0)]}
    with OpenAIServer(script, require_key=KEY) as model:
        install(
            cp,
            ns,
            model.url,
            agent("helper", []),
            agent_tool("ask-helper", "helper"),
            agent("boss", ["ask-helper"]),
        )
        operator = operator_factory("--lease-seconds", "5")
        apply(cp, ns, task("early", "boss", f"{PARENT} go"))
        wait_for(lambda: children_of(cp, ns, "early") or None, 60, what="the child Task")
        operator.kill_and_restart()
        status = wait_task(cp, ns, "early", timeout=120)["status"]
        assert (status["phase"], status.get("output")) == ("Succeeded", "got 42"), (
            status,
            operator.task_log("early"),
        )
        assert len(children_of(cp, ns, "early")) == 1
        assert len(parent_requests(model)) == 2
