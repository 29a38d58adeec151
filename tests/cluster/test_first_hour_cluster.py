"""The first hour on a real API server: `kubectl explain` reads well (no hard breaks, the
defaults, what `task.spec.input` takes); a failed tool call shows its cause in the Task's
audit record, a `ToolFailed` Event and the log; a Task naming no existing Agent is counted
under `agent="(unknown)"`, with no `_created` series; an operator whose port is taken exits
naming the flag."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.operator import OperatorProcess, apply, events, wait_for, wait_task

from ordo_devcluster import ControlPlane

CANARY = "CANARY-first-hour-51d2"


def test_explain_shows_defaults_and_flowing_descriptions(control_plane: ControlPlane) -> None:
    limits = control_plane.kubectl("explain", "agent.spec.limits").stdout
    assert "Default: 10." in limits
    assert "Default: 5m." in limits
    field = control_plane.kubectl("explain", "task.spec.input").stdout
    assert "String or object" in field
    # Descriptions as served: a paragraph is one line (kubectl wraps it to the terminal).
    crd = json.loads(control_plane.kubectl("get", "crd", "tasks.ordo.dev", "-o", "json").stdout)
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    assert "\n" not in spec["description"]
    decision = schema["properties"]["status"]["properties"]["toolCalls"]["items"]["properties"]
    assert "\n" not in decision["decision"]["description"]
    assert decision["error"]["maxLength"] == 128


@pytest.fixture
def dead_port() -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


FAILING_TOOL = """
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {{name: scripted}}
spec:
  provider: mock
  mock:
    turns:
      - toolCalls: [{{tool: order-status, arguments: {{order: "{canary}"}}}}]
      - text: the order service is down
---
apiVersion: ordo.dev/v1alpha1
kind: Tool
metadata: {{name: order-status}}
spec:
  type: http
  description: Look up an order.
  http: {{url: "http://127.0.0.1:{port}/orders", method: POST}}
  timeout: 5s
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {{name: support}}
spec: {{modelRef: scripted, tools: [order-status]}}
---
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {{name: where-is-my-order}}
spec: {{agentRef: support, input: "where is it?"}}
---
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {{name: made-up-agent}}
spec: {{agentRef: no-such-agent-{canary_lower}, input: hi}}
"""


def test_failed_tool_call_cause_is_audited_and_agent_label_bounded(
    control_plane: ControlPlane, namespace: str, tmp_path: Path, dead_port: int
) -> None:
    op = OperatorProcess(control_plane, namespace, tmp_path).start()
    try:
        apply(
            control_plane,
            namespace,
            FAILING_TOOL.format(port=dead_port, canary=CANARY, canary_lower=CANARY.lower()),
        )
        status = wait_task(control_plane, namespace, "where-is-my-order")["status"]
        assert status["phase"] == "Succeeded", status
        [record] = status["toolCalls"]
        assert (record["tool"], record["outcome"], record["error"]) == (
            "order-status",
            "error",
            "ConnectError",
        )

        def tool_failed() -> list[dict[str, object]]:
            found = events(control_plane, namespace, "where-is-my-order")
            return [e for e in found if e["reason"] == "ToolFailed"]

        [event] = wait_for(tool_failed, 30, what="a ToolFailed Event")
        assert event["type"] == "Warning"
        assert event["message"] == "tool order-status failed at step 1: ConnectError"

        lines = [r for r in op.log_records() if r.get("msg") == "tool failed"]
        assert lines and lines[0]["cause"] == "ConnectError"
        assert lines[0]["task"] == "where-is-my-order"

        missing = wait_task(control_plane, namespace, "made-up-agent")["status"]
        assert missing["reason"] == "AgentNotFound"
        text = op.metrics()
        assert f'ordo_tasks_total{{agent="(unknown)",namespace="{namespace}"' in text
        assert CANARY.lower() not in text
        assert "_created" not in text
        assert CANARY not in op.logs()
    finally:
        op.stop()


def test_operator_exits_naming_the_port_flag_in_use(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    taken = socket.socket()
    taken.bind(("0.0.0.0", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "ordo.cli.main",
                "operator",
                "-n",
                namespace,
                "--health-port",
                str(port),
                "--metrics-port",
                "0",
                "--log-format",
                "text",
            ],
            env=control_plane.env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        taken.close()
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"--health-port {port} is in use" in result.stderr
    assert "Traceback" not in result.stderr
