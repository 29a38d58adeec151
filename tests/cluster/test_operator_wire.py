"""The operator over real wire protocols: models served by the scripted OpenAI and Anthropic
servers, side effects by a counting HTTP tool; restarts (SIGKILL), load, and canaries."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest
from tests.support.anthropic_server import AnthropicServer
from tests.support.counting_tool import CountingTool
from tests.support.credentials import opted_in
from tests.support.openai_server import OpenAIServer
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

KEY = "sk-canary-SECRET-4f1d"


def secret(ns: str, name: str = "model-key", value: str = KEY) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": opted_in({"name": name, "namespace": ns}),
            "data": {"api-key": base64.b64encode(value.encode()).decode()},
        }
    )


def endpoint(provider: str, base_url: str, model: str = "gpt-test", **extra: Any) -> str:
    spec = {
        "provider": provider,
        "baseUrl": base_url,
        "model": model,
        "credentials": {"secretRef": {"name": "model-key", "key": "api-key"}},
        "retry": {"maxAttempts": 2, "backoff": "100ms"},
        **extra,
    }
    return json.dumps(
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "ModelEndpoint",
            "metadata": {"name": "model"},
            "spec": spec,
        }
    )


def http_tool(name: str, url: str, idempotent: bool = False) -> str:
    return json.dumps(
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "Tool",
            "metadata": {"name": name},
            "spec": {
                "type": "http",
                "description": "records an order",
                "inputSchema": {"type": "object", "properties": {"item": {"type": "string"}}},
                "http": {"url": url},
                "idempotent": idempotent,
                "timeout": "30s",
            },
        }
    )


def agent(tools: list[str], max_steps: int = 10, prompt: str = "You place orders.") -> str:
    return json.dumps(
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "Agent",
            "metadata": {"name": "agent"},
            "spec": {
                "modelRef": "model",
                "prompt": prompt,
                "tools": tools,
                "limits": {"maxSteps": max_steps, "timeout": "120s"},
            },
        }
    )


def task(name: str, text: str = "order one widget") -> str:
    return json.dumps(
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "Task",
            "metadata": {"name": name},
            "spec": {"agentRef": "agent", "input": text},
        }
    )


@pytest.mark.parametrize(
    ("server", "provider", "path", "call_id"),
    [
        pytest.param(OpenAIServer, "openai-compatible", "/v1", "call_abc", id="openai"),
        pytest.param(AnthropicServer, "anthropic", "", "toolu_1", id="anthropic"),
    ],
)
def test_tool_loop_over_the_wire(
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorProcess,
    server: type[OpenAIServer | AnthropicServer],
    provider: str,
    path: str,
    call_id: str,
) -> None:
    """One tool call in the provider's native protocol: OpenAI `tool_calls`, then a `role: tool`
    message with `tool_call_id`; Anthropic `tool_use`, then a `tool_result` with `tool_use_id`."""
    call = {"name": "place-order", "arguments": {"item": "widget"}, "id": call_id}
    script = [{"tool_calls": [call]}, {"text": "ordered"}]
    with CountingTool() as tool, server(script, require_key=KEY) as model:
        for doc in (
            secret(namespace),
            endpoint(provider, model.url + path),
            http_tool("place-order", tool.url),
            agent(["place-order"]),
            task("order"),
        ):
            apply(control_plane, namespace, doc)
        status = wait_task(control_plane, namespace, "order")["status"]
        assert (status["phase"], status["output"]) == ("Succeeded", "ordered"), status
        assert model.count == 2 and tool.count == 1
        second = model.bodies[1]
        if server is OpenAIServer:
            offered = [[t["function"]["name"] for t in b.get("tools") or []] for b in model.bodies]
            results = [m["tool_call_id"] for m in second["messages"] if m["role"] == "tool"]
            system = [m["content"] for m in second["messages"] if m["role"] == "system"]
        else:
            offered = [[t["name"] for t in b.get("tools") or []] for b in model.bodies]
            results = [
                b["tool_use_id"]
                for m in second["messages"]
                if m["role"] == "user" and isinstance(m["content"], list)
                for b in m["content"]
                if b.get("type") == "tool_result"
            ]
            system = second["system"]
        assert results == [call_id]
        assert offered == [["place-order"], []]  # the used tool is no longer offered
        assert "You place orders." in json.dumps(system)
        assert status["usage"]["totalTokens"] > 0


def test_max_steps_counts_model_requests(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    calls = [
        {"tool_calls": [{"name": "place-order", "arguments": {"item": f"w{i}"}}]} for i in range(10)
    ]
    with CountingTool() as tool, OpenAIServer(calls, require_key=KEY) as model:
        for doc in (
            secret(namespace),
            endpoint("openai-compatible", model.url + "/v1"),
            http_tool("place-order", tool.url),
            agent(["place-order"], max_steps=3),
            task("loop"),
        ):
            apply(control_plane, namespace, doc)
        status = wait_task(control_plane, namespace, "loop")["status"]
        assert (status["phase"], status["reason"]) == ("Failed", "MaxStepsExceeded")
        assert model.count == 3
        assert tool.count == 1  # later calls of the used tool are rejected, never executed


def _kill_when(op: OperatorProcess, predicate: Any, what: str) -> None:
    wait_for(predicate, 60, interval=0.05, what=what)
    op.kill()


@pytest.mark.slow
@pytest.mark.parametrize(
    "point",
    ["before-first-model-call", "between-steps", "during-tool-call", "during-idempotent-tool-call"],
)
def test_sigkill_and_restart(
    control_plane: ControlPlane, namespace: str, tmp_path: Path, point: str
) -> None:
    op = OperatorProcess(control_plane, namespace, tmp_path).start()
    delay_tool = 4.0 if point.startswith("during") else 0.0
    first_delay = 4.0 if point == "before-first-model-call" else 0.0
    second_delay = 4.0 if point == "between-steps" else 0.0
    script = [
        {
            "delay": first_delay,
            "tool_calls": [
                {"name": "place-order", "arguments": {"item": "widget"}, "id": "call_1"}
            ],
        },
        {"delay": second_delay, "text": "ordered"},
        {"text": "ordered"},
    ]
    try:
        with CountingTool(delay=delay_tool) as tool, OpenAIServer(script, require_key=KEY) as model:
            idempotent = point == "during-idempotent-tool-call"
            for doc in (
                secret(namespace),
                endpoint("openai-compatible", model.url + "/v1"),
                http_tool("place-order", tool.url, idempotent),
                agent(["place-order"]),
                task("order"),
            ):
                apply(control_plane, namespace, doc)
            if point == "before-first-model-call":
                _kill_when(op, lambda: model.count >= 1, "the first model call")
            elif point == "between-steps":
                # Once the step is flushed (checkpoint, then status.step; coalesce.py); a kill
                # before the flush resumes as well (test_chaos.py).
                _kill_when(
                    op,
                    lambda: (
                        model.count >= 2
                        and get_json(control_plane, "task", "order", "-n", namespace)
                        .get("status", {})
                        .get("step", 0)
                        >= 1
                    ),
                    "the second model call, after the flush of step 1",
                )
            else:
                _kill_when(op, lambda: tool.count >= 1, "the tool call")
            mid = get_json(control_plane, "task", "order", "-n", namespace)
            assert mid["status"]["phase"] == "Running"
            # A killed operator leaves the Task Running; the restarted one finishes it.
            # After the restart the model answers at once, except where the run restarts from
            # scratch (nothing was checkpointed): then it follows the whole script again.
            from_scratch = point in ("before-first-model-call", "during-idempotent-tool-call")
            model.set_script(script if from_scratch else [{"text": "ordered"}] * 3)
            op.start()
            status = wait_task(control_plane, namespace, "order", timeout=90)["status"]
            if point == "during-tool-call":
                assert (status["phase"], status["reason"]) == ("Failed", "Interrupted"), status
                assert tool.count == 1  # never repeated: the tool is not idempotent
            elif point == "during-idempotent-tool-call":
                assert status["phase"] == "Succeeded", status
                # No checkpoint is written before an idempotent call, so the run restarts from
                # scratch and the tool may run again: that is what idempotent allows.
                assert tool.count == 2
            else:
                assert status["phase"] == "Succeeded", status
                assert tool.count == 1
            assert "Resumed" in [e["reason"] for e in events(control_plane, namespace, "order")]
            assert all(t["status"]["phase"] != "Running" for t in tasks(control_plane, namespace))
    finally:
        op.stop()


@pytest.mark.slow
def test_200_tasks_with_concurrency_20(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    op = OperatorProcess(control_plane, namespace, tmp_path, "--max-concurrent-tasks", "20").start()
    try:
        with OpenAIServer(None, fallback={"auto": True, "delay": 0.3}) as model:
            docs = [secret(namespace), endpoint("openai-compatible", model.url + "/v1"), agent([])]
            for doc in docs:
                apply(control_plane, namespace, doc)
            bulk = "\n---\n".join(task(f"t{i:03d}") for i in range(200))
            apply(control_plane, namespace, bulk)
            peak = 0
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                items = tasks(control_plane, namespace)
                phases = [(t.get("status") or {}).get("phase") for t in items]
                running = phases.count("Running")
                peak = max(peak, running)
                assert running <= 20, f"{running} Tasks Running at once"
                if len(items) == 200 and all(
                    p in ("Succeeded", "Failed", "Cancelled") for p in phases
                ):
                    break
                time.sleep(0.2)
            phases = [t["status"]["phase"] for t in tasks(control_plane, namespace)]
            assert phases.count("Succeeded") == 200, {p: phases.count(p) for p in set(phases)}
            assert peak > 1
            waiting = [
                t
                for t in tasks(control_plane, namespace)
                if any(c["type"] == "Scheduled" for c in t["status"].get("conditions", []))
            ]
            assert waiting
            metrics = op.metrics()
            total = sum(
                float(line.rsplit(" ", 1)[1])
                for line in metrics.splitlines()
                if line.startswith("ordo_tasks_total{")
            )
            assert total == 200
    finally:
        op.stop()


def test_canaries_never_leak(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    prompt_canary = "CANARY-PROMPT-9a7"
    answer_canary = "CANARY-ANSWER-31c"
    args_canary = "CANARY-ARGS-5e2"
    result_canary = "CANARY-RESULT-d40"
    with (
        CountingTool(reply={"secret": result_canary}) as tool,
        OpenAIServer(
            [
                {"tool_calls": [{"name": "place-order", "arguments": {"item": args_canary}}]},
                {"text": f"done {answer_canary}"},
            ],
            require_key=KEY,
        ) as model,
    ):
        for doc in (
            secret(namespace),
            endpoint("openai-compatible", model.url + "/v1"),
            http_tool("place-order", tool.url),
            agent(["place-order"], prompt=f"Be careful. {prompt_canary}"),
            task("order", f"input {prompt_canary}"),
        ):
            apply(control_plane, namespace, doc)
        status = wait_task(control_plane, namespace, "order")["status"]
        assert status["phase"] == "Succeeded"
        assert answer_canary in status["output"]  # the one place model output goes
        assert tool.calls[0]["headers"].get("authorization") is None  # no secretRef on this tool
        assert model.requests[0].headers.get("authorization") == f"Bearer {KEY}"
        checked = {
            "logs": operator.logs(),
            "events": json.dumps(events(control_plane, namespace)),
            "conditions": json.dumps(status.get("conditions")) + status.get("message", ""),
            "toolCalls": json.dumps(status.get("toolCalls")),
            "metrics": operator.metrics(),
        }
        for where, text in checked.items():
            for canary in (KEY, prompt_canary, answer_canary, args_canary, result_canary):
                assert canary not in text, f"{canary} leaked into {where}"


@pytest.mark.slow
def test_two_replicas_execute_each_task_once(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """Two standalone operators on one namespace: conditional claims and execution leases
    mean every Task runs once; killing the replica that runs a Task hands it to the other."""
    first = (
        OperatorProcess(control_plane, namespace, tmp_path / "a").start()
        if (tmp_path / "a").mkdir() is None
        else None
    )
    second = (
        OperatorProcess(control_plane, namespace, tmp_path / "b").start()
        if (tmp_path / "b").mkdir() is None
        else None
    )
    assert first is not None and second is not None
    script = {
        "*": [
            {"tool_calls": [{"name": "place-order", "arguments": {"item": "w"}}], "delay": 0.2},
            {"text": "ordered"},
        ]
    }
    try:
        with (
            CountingTool() as tool,
            OpenAIServer(None, fallback={"auto": True, "delay": 0.2}) as model,
        ):
            _ = script
            for doc in (
                secret(namespace),
                endpoint("openai-compatible", model.url + "/v1"),
                http_tool("place-order", tool.url),
                agent(["place-order"]),
            ):
                apply(control_plane, namespace, doc)
            apply(control_plane, namespace, "\n---\n".join(task(f"t{i:02d}") for i in range(20)))
            for i in range(20):
                status = wait_task(control_plane, namespace, f"t{i:02d}", timeout=120)["status"]
                assert status["phase"] == "Succeeded", status
            assert tool.count == 20  # one side effect per Task, never two
            executions = [t["status"]["executionId"] for t in tasks(control_plane, namespace)]
            assert len(set(executions)) == 20
    finally:
        first.stop()
        second.stop()


def test_mcp_tool_ready_and_called(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    from tests.support.mcp_server import McpTestServer

    def mcp_tool(name: str, url: str, remote: str) -> str:
        return json.dumps(
            {
                "apiVersion": "ordo.dev/v1alpha1",
                "kind": "Tool",
                "metadata": {"name": name},
                "spec": {
                    "type": "mcp",
                    "mcp": {"url": url, "toolName": remote},
                    "idempotent": True,
                },
            }
        )

    def ready(name: str) -> dict[str, Any] | None:
        return ready_condition(control_plane, namespace, "tool", name)

    with (
        McpTestServer() as server,
        OpenAIServer(
            [
                {"tool_calls": [{"name": "echo", "arguments": {"text": "hello"}, "id": "c1"}]},
                {"text": "echoed"},
            ],
            require_key=KEY,
        ) as model,
    ):
        mcp_url = server.url
        for doc in (
            secret(namespace),
            endpoint("openai-compatible", model.url + "/v1"),
            mcp_tool("echo", mcp_url, "echo"),
            mcp_tool("missing", mcp_url, "no-such-tool"),
            agent(["echo"]),
        ):
            apply(control_plane, namespace, doc)
        good = wait_for(
            lambda: (c := ready("echo")) and c["status"] == "True" and c, 30, what="mcp Tool Ready"
        )
        assert good["reason"] == "Listed"
        bad = wait_for(
            lambda: (c := ready("missing")) and c["status"] == "False" and c,
            30,
            what="mcp Tool not Ready",
        )
        assert "no-such-tool" in bad["message"]
        apply(control_plane, namespace, task("say"))
        status = wait_task(control_plane, namespace, "say")["status"]
        assert (status["phase"], status["output"]) == ("Succeeded", "echoed"), status
        assert server.calls["echo"] == 1
        # The tool's schema came from the server's tool list.
        offered = model.bodies[0]["tools"][0]["function"]
        assert offered["name"] == "echo" and "text" in offered["parameters"]["properties"]
