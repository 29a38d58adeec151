"""`ordo invoke` and `ordo approvals` on a tree of Tasks (issue 27 §6), against the real
control plane with the operator as a subprocess: while the parent waits for its child, invoke
shows the child's progress and that it waits for an approval; `ordo approvals PARENT` (and a
refused `ordo approve PARENT ...`) names the child; the call is approved on the child; the
final summary lists the child. Nothing of the input, the arguments or the answers in the
progress lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.operator import OperatorProcess, apply, get_json, tasks, wait_for

from ordo_devcluster import ControlPlane

VENV_BIN = Path(sys.executable).parent
INPUT_CANARY = "CANARY-tree-input-51c2"
ARGUMENT_CANARY = "CANARY-tree-argument-0d7e"
CHILD_ANSWER = "CANARY-child-answer-a41f"
PARENT_ANSWER = "the researcher found it"

TREE = f"""
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {{name: writer-model}}
spec:
  provider: mock
  model: mock-1
  mock:
    turns:
      - toolCalls: [{{tool: ask-researcher, arguments: {{input: "look it up {INPUT_CANARY}"}}}}]
      - text: {PARENT_ANSWER}
---
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {{name: researcher-model}}
spec:
  provider: mock
  model: mock-1
  mock:
    turns:
      - toolCalls: [{{tool: publish, arguments: {{target: {ARGUMENT_CANARY}}}}}]
      - text: {CHILD_ANSWER}
---
apiVersion: ordo.dev/v1alpha1
kind: Tool
metadata: {{name: ask-researcher}}
spec:
  type: agent
  description: Ask the researcher.
  agent: {{ref: researcher}}
---
apiVersion: ordo.dev/v1alpha1
kind: Tool
metadata: {{name: publish}}
spec:
  type: mock
  description: Publishes something; a person approves each call.
  mock: {{result: published}}
  approval: {{required: true}}
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {{name: writer}}
spec:
  modelRef: writer-model
  prompt: Write; ask the researcher.
  tools: [ask-researcher]
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {{name: researcher}}
spec:
  modelRef: researcher-model
  prompt: Research; publish what you find.
  tools: [publish]
"""


def ordo(cp: ControlPlane, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = cp.env(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        [sys.executable, "-m", "ordo.cli.main", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def parent_waiting_on_an_approving_child(cp: ControlPlane, ns: str) -> dict[str, Any] | None:
    for task in tasks(cp, ns):
        if task["spec"]["agentRef"] != "writer":
            continue
        children = (task.get("status") or {}).get("children") or []
        if children and children[0].get("awaitingApproval") is True:
            return task
    return None


def test_invoke_follows_a_child_that_waits_for_an_approval(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    cp, ns = control_plane, namespace
    apply(cp, ns, TREE)
    argv = ["invoke", "writer", "-n", ns, "--input", f"write {INPUT_CANARY}", "--timeout", "180s"]
    invoking = subprocess.Popen(
        [sys.executable, "-m", "ordo.cli.main", *argv],
        env=cp.env(os.environ),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        parent = wait_for(
            lambda: parent_waiting_on_an_approving_child(cp, ns),
            timeout=90,
            what="the parent to show its child waiting for an approval",
        )
        name = parent["metadata"]["name"]
        (child,) = parent["status"]["children"]
        assert child["agent"] == "researcher" and child["phase"] == "Running"
        child_name = child["name"]

        # On the parent: no call of its own, the child named.
        listing = ordo(cp, "approvals", name, "-n", ns)
        assert listing.returncode == 0, listing.stderr
        assert listing.stdout.splitlines() == [
            f"Task {name} waits for no tool-call approval of its own",
            f"child Task {child_name} waits for an approval: ordo approvals {child_name}",
        ]
        refused = ordo(cp, "approve", name, "call-x", "-n", ns, "--approved-by", "me")
        assert refused.returncode == 1
        assert f"ordo approvals {child_name}" in refused.stderr

        # On the child: its call, approved there.
        calls = ordo(cp, "approvals", child_name, "-n", ns, "-o", "json")
        assert calls.returncode == 0, calls.stderr
        (call,) = json.loads(calls.stdout)
        assert call["tool"] == "publish" and call["arguments"] == {"target": ARGUMENT_CANARY}
        approved = ordo(cp, "approve", child_name, call["callId"], "-n", ns)
        assert approved.returncode == 0, approved.stderr
        out, err = invoking.communicate(timeout=150)
    finally:
        if invoking.poll() is None:
            invoking.kill()
            invoking.communicate()
    assert invoking.returncode == 0, err
    assert out.strip() == PARENT_ANSWER
    assert f"child task/{child_name} waits for an approval (ordo approvals {child_name})" in err
    assert f"task/{name} Succeeded" in err
    assert f"  child task/{child_name} (agent researcher): Succeeded" in err, err
    for canary in (INPUT_CANARY, ARGUMENT_CANARY, CHILD_ANSWER):
        assert canary not in err
    done = get_json(cp, "task", name, "-n", ns)
    assert [c["name"] for c in done["status"]["children"]] == [child_name]
    assert len(tasks(cp, ns)) == 2  # the parent and its one child
