"""AgentPolicy `allowedTools` and `suspend` with the operator as a subprocess (issue 16 §1):
an allowlist denial costs zero model requests; suspending stops a running Task at its next step
boundary (the model call is held open by the test until the suspension is visible); a new Task
of a suspended Agent costs zero requests; `kubectl get agents` names the suspending policy;
lifting the suspension lets new Tasks run."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from aiohttp import web
from tests.support.counting_tool import CountingTool
from tests.support.openai_server import OpenAIServer
from tests.support.operator import OperatorProcess, apply, doc, get_json, wait_for, wait_task

from ordo_devcluster import ControlPlane


class GatedModel(OpenAIServer):
    """The scripted OpenAI server, but every model call waits until `release` is set (the
    test decides when the model "answers"); `arrived` is set when the first call comes in."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.arrived = threading.Event()
        self.release = threading.Event()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if self.is_model_call(request):
            self.arrived.set()
            await asyncio.to_thread(self.release.wait, 120)
        return await super()._handle(request)


def setup(cp: ControlPlane, ns: str, model_url: str, tool_url: str) -> None:
    for manifest in (
        doc(
            "ModelEndpoint",
            "model",
            {"provider": "openai-compatible", "baseUrl": model_url, "model": "gpt-test"},
        ),
        doc(
            "Tool",
            "place-order",
            {"type": "http", "description": "records an order", "http": {"url": tool_url}},
        ),
        doc("Tool", "read-orders", {"type": "mock", "description": "lists orders"}),
        doc("Agent", "agent", {"modelRef": "model", "tools": ["place-order"]}),
    ):
        apply(cp, ns, manifest)


def run_task(cp: ControlPlane, ns: str, name: str) -> dict[str, Any]:
    apply(cp, ns, doc("Task", name, {"agentRef": "agent", "input": "order one widget"}))
    status: dict[str, Any] = wait_task(cp, ns, name)["status"]
    return status


def suspended_by(cp: ControlPlane, ns: str) -> str | None:
    agent = get_json(cp, "agent", "agent", "-n", ns)
    value: str | None = (agent.get("status") or {}).get("suspendedBy")
    return value


def test_a_tool_outside_the_allowlist_fails_the_task_with_zero_model_requests(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    with CountingTool() as tool, OpenAIServer([{"text": "never"}]) as model:
        setup(control_plane, namespace, model.url + "/v1", tool.url)
        apply(
            control_plane,
            namespace,
            doc("AgentPolicy", "reads-only", {"allowedTools": ["read-orders"]}),
        )
        status = run_task(control_plane, namespace, "order")
        assert (status["phase"], status["reason"]) == ("Failed", "ToolDenied"), status
        assert "'reads-only'" in status["message"] and "place-order" in status["message"]
        assert status["step"] == 0 and not status.get("toolCalls")
        assert model.count == 0 and tool.count == 0
        wide = control_plane.kubectl("get", "apol", "-n", namespace, "-o", "wide").stdout
        assert "ALLOWED" in wide and "read-orders" in wide


def test_suspend_stops_a_running_task_and_unsuspend_lets_new_tasks_run(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    cp, ns = control_plane, namespace
    call = {"name": "place-order", "arguments": {"item": "widget"}, "id": "call_1"}
    script = [{"tool_calls": [call]}, {"text": "ordered"}]
    with CountingTool() as tool, GatedModel(script) as model:
        setup(cp, ns, model.url + "/v1", tool.url)
        apply(cp, ns, doc("Task", "running", {"agentRef": "agent", "input": "order one widget"}))
        wait_for(model.arrived.is_set, 60, what="the first model call")

        # The model is "thinking"; the platform team pulls the kill switch.
        apply(cp, ns, doc("AgentPolicy", "freeze", {"suspend": True}))
        wait_for(lambda: suspended_by(cp, ns) == "freeze", 60, what="Agent SUSPENDED-BY")
        listing = cp.kubectl("get", "agents", "-n", ns).stdout
        assert "SUSPENDED-BY" in listing and "freeze" in listing
        assert "true" in cp.kubectl("get", "apol", "freeze", "-n", ns).stdout

        model.release.set()  # the model answers with a tool call: the boundary stops it
        status = wait_task(cp, ns, "running")["status"]
        assert (status["phase"], status["reason"]) == ("Failed", "AgentSuspended"), status
        assert "'freeze'" in status["message"]
        assert status["step"] == 1 and model.count == 1
        assert tool.count == 0 and not status.get("toolCalls")  # the call never ran

        # A new Task of the suspended Agent: zero model requests.
        status = run_task(cp, ns, "while-suspended")
        assert (status["phase"], status["reason"], status["step"]) == (
            "Failed",
            "AgentSuspended",
            0,
        )
        assert model.count == 1

        # Lifting the suspension: the Agent is Ready again and new Tasks run.
        apply(cp, ns, doc("AgentPolicy", "freeze", {"suspend": False}))
        wait_for(lambda: suspended_by(cp, ns) is None, 60, what="suspendedBy cleared")
        status = run_task(cp, ns, "after")
        assert (status["phase"], status["output"]) == ("Succeeded", "ordered"), status
        assert model.count == 2
