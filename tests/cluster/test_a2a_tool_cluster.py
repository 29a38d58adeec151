"""An Agent with an `a2a` Tool against the real control plane, the operator as a subprocess,
the remote agent built from the a2a-sdk's own server classes (tests/support/a2a_agent.py):
SIGKILLed while the remote task runs (after the run has polled it, so its id is durable), the
operator resumes the Task, polls the same remote task instead of sending again (one send at
the server), and the Task finishes with the remote answer; and the Task's deadline cancels a
remote task that never ends."""

from __future__ import annotations

from pathlib import Path

from tests.support.a2a_agent import RemoteAgentServer
from tests.support.operator import OperatorProcess, apply, get_json, wait_for, wait_task

from ordo_devcluster import ControlPlane

LEASE_SECONDS = 3.0


def manifests(remote: str, timeout: str = "3m") -> str:
    return f"""
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {{name: model}}
spec:
  provider: mock
  model: mock-1
  mock:
    turns:
      - toolCalls: [{{tool: remote, arguments: {{input: SLOW}}}}]
      - text: the remote agent answered
---
apiVersion: ordo.dev/v1alpha1
kind: Tool
metadata: {{name: remote}}
spec:
  type: a2a
  timeout: 2m
  a2a: {{url: "{remote}"}}
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {{name: caller}}
spec: {{modelRef: model, tools: [remote], limits: {{timeout: {timeout}}}}}
---
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {{name: ask}}
spec: {{agentRef: caller, input: ask the remote agent}}
"""


def test_a_sigkill_while_the_remote_task_runs_does_not_send_twice(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    op = OperatorProcess(
        control_plane, namespace, tmp_path, "--lease-seconds", f"{LEASE_SECONDS:g}"
    ).start()
    try:
        with RemoteAgentServer() as remote:
            apply(control_plane, namespace, manifests(remote.url))
            wait_for(remote.working.is_set, 60, what="the remote task to start")
            # a request after the send is a GetTask: the task id was checkpointed before it
            wait_for(lambda: len(remote.headers) >= 2, 30, interval=0.05, what="a GetTask")
            op.kill()
            checkpointed = get_json(control_plane, "task", "ask", "-n", namespace)["status"]
            assert checkpointed["phase"] == "Running", checkpointed
            remote.release()
            op.start()
            status = wait_task(control_plane, namespace, "ask", timeout=120)["status"]
            sends, cancels = list(remote.sends), list(remote.cancels)
        assert (status["phase"], status["output"]) == ("Succeeded", "the remote agent answered")
        assert len(sends) == 1, sends
        assert cancels == []
        [call] = status["toolCalls"]
        assert (call["tool"], call["outcome"]) == ("remote", "succeeded")
    finally:
        op.stop()


def test_the_tasks_deadline_cancels_the_remote_task(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    op = OperatorProcess(control_plane, namespace, tmp_path).start()
    try:
        with RemoteAgentServer() as remote:
            apply(control_plane, namespace, manifests(remote.url, timeout="8s"))
            wait_for(remote.working.is_set, 60, what="the remote task to start")
            status = wait_task(control_plane, namespace, "ask", timeout=90)["status"]
            wait_for(lambda: len(remote.cancels) >= 1, 30, what="the remote task cancelled")
            sends, cancels = list(remote.sends), list(remote.cancels)
        assert (status["phase"], status["reason"]) == ("Failed", "Timeout"), status
        assert len(sends) == 1, sends
        assert len(cancels) == 1, cancels
    finally:
        op.stop()
